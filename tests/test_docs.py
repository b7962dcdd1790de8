"""The README and the docs site stay legible (issue 52: the README had been a 105 KB wall with a 168-word
sentence and paragraphs of 700 words): the README fits two screens, no paragraph or list item runs past
PARAGRAPH_WORDS, no sentence past SENTENCE_WORDS, and every page is in the site's navigation.

What is prose: a page's paragraphs and list items, each read as one text. Fenced blocks, tables, headings,
HTML comments and admonition titles are not prose. In prose a code span counts as one word, a link as its
text and a bare <URL> as one word, so that a long identifier neither pads a paragraph nor hides in it.

Where a sentence ends: at `.`, `?` or `!` (a closing quote, parenthesis or `*` may follow) and a space, before
a capital letter or a code span (which may open a sentence), but not after an abbreviation (`e.g.`, `et al.`).
A semicolon or a colon ends no sentence: a clause after one still has to be read with what came before.

docs/decisions and docs/research are records of their time, written as they were decided; they are kept as
they are and not checked here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
KEPT_AS_WRITTEN = ("decisions", "research")

README_LINES = 80  # two screens
PARAGRAPH_WORDS = 150
SENTENCE_WORDS = 60

CODE = "Code"  # what a code span reads as: one word, and one that may open a sentence
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
TABLE_ROW = re.compile(r"^\s*\|")
TITLE_ONLY = re.compile(r"^\s*(!!!|\?\?\?\+?|===)\s")  # an admonition's, a details' or a tab's title line
LIST_ITEM = re.compile(r"^\s*(?:[*+-]|\d+[.)])\s+")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
BARE_URL = re.compile(r"<https?://[^>]+>")
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
SENTENCE_END = re.compile(r"([.?!][\"')\]*_]*)\s+(?=[\"'(\[*_]*(?:[A-Z]|" + CODE + r"\b))")
ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "cf.", "vs.", "etc.", "Fig.", "Eq.", "No.")


@dataclass(frozen=True)
class Prose:
    """A paragraph or a list item: the line it starts on, and its text as one line, spans replaced."""

    line: int
    text: str

    @property
    def words(self) -> int:
        return len(self.text.split())

    def beginning(self, words: int = 12) -> str:
        return " ".join(self.text.split()[:words]) + " ..."


def plain(text: str) -> str:
    """`text` as it reads: code spans one word, links their text, bare URLs one word."""
    text = CODE_SPAN.sub(CODE, text)
    text = IMAGE_OR_LINK.sub(lambda link: link.group(1), text)
    return BARE_URL.sub("URL", text)


def prose(text: str) -> list[Prose]:
    """The paragraphs and list items of a Markdown page, in order (see the module's docstring)."""
    text = COMMENT.sub(lambda comment: "\n" * comment.group().count("\n"), text)
    found: list[Prose] = []
    current: list[str] = []
    start = 0
    in_fence = False

    def close() -> None:
        if current:
            found.append(Prose(start, plain(" ".join(line.strip() for line in current))))
            current.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            close()
            in_fence = not in_fence
        elif in_fence:
            continue
        elif not line.strip() or HEADING.match(line) or TABLE_ROW.match(line) or TITLE_ONLY.match(line):
            close()
        else:
            if LIST_ITEM.match(line):
                close()
            if not current:
                start = number
            current.append(LIST_ITEM.sub("", line, count=1) if not current else line)
    close()
    return found


def sentences(text: str) -> list[str]:
    """The sentences of a paragraph's plain text (see the module's docstring for where one ends)."""
    found, begin = [], 0
    for end in SENTENCE_END.finditer(text):
        if text[: end.start() + 1].endswith(ABBREVIATIONS):
            continue
        found.append(text[begin : end.end(1)].strip())
        begin = end.end()
    found.append(text[begin:].strip())
    return [sentence for sentence in found if sentence]


def checked_pages() -> list[Path]:
    """The README and every page of the docs site but the decisions and the research notes."""
    pages = sorted(DOCS.rglob("*.md"))
    return [ROOT / "README.md"] + [
        page for page in pages if page.relative_to(DOCS).parts[0] not in KEPT_AS_WRITTEN
    ]


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


# The first three sentences of the cluster model's page as the README's move to docs/ left it
# (ad4f986:docs/explanation/cluster-model.md): the wall these checks keep out.
OLD_WALL = """\
Time comes from a model of distributed training (`service/core/performance.py`, every formula with its
source), not from a guessed MFU. For the model and cluster of a request it searches every layout (tensor
parallelism over the divisors of a node that divide the heads, pipeline stages, data parallelism, the
micro-batch, interleaving, recomputation and ZeRO stage), drops those that do not fit memory, and takes the
fastest; a step is the sum of matrix multiplies (at an efficiency that falls for small ones), element-wise
work at HBM bandwidth, tensor-parallel collectives on the scale-up link (or the network when a group spans
nodes), the pipeline bubble and transfers, the data-parallel traffic the backward pass does not hide (a
group spanning nodes moves data at the node's aggregate network bandwidth, its rings crossing each node
boundary once per rank of the group in the node), and the optimizer. Goodput adds failures (the hardware's
rate per accelerator-hour, Llama 3's by default), Young/Daly checkpoints and restarts, and a run overhead for
what whole runs lose besides (evaluation, loss-spike restarts, slow nodes, data stalls, and the layouts teams
run against the one the planner would choose; default 28%, what 16 published whole runs took beyond the
planner's pace for them: `bench/RESULTS.md`; a hardware profile's `run_overhead` states its installation's, an
organisation's calibration fits its own from its runs' hours, `reliability.run_overhead` sets a request's,
and `goodput.run_overhead_source` says whose was taken).
"""


def test_the_old_wall_is_one_paragraph_too_long_with_sentences_too_long():
    (paragraph,) = prose(OLD_WALL)
    lengths = [len(sentence.split()) for sentence in sentences(paragraph.text)]

    assert paragraph.words > PARAGRAPH_WORDS
    assert len(lengths) == 3
    assert lengths[0] < SENTENCE_WORDS < min(lengths[1:])


def test_a_semicolon_or_a_colon_ends_no_sentence_and_a_full_stop_before_a_capital_does():
    text = "A budget binds; the tightest wins: cost. Then time follows. and this goes on"

    assert sentences(text) == [
        "A budget binds; the tightest wins: cost.",
        "Then time follows. and this goes on",
    ]


def test_abbreviations_decimals_and_dots_in_code_end_no_sentence():
    text = "As Besiroglu et al. 2024 did, e.g. `planner plan create. Then` at 1.95 USD. Hoffmann et al. Later"

    assert sentences(plain(text)) == [
        "As Besiroglu et al. 2024 did, e.g. Code at 1.95 USD.",
        "Hoffmann et al. Later",
    ]


def test_a_sentence_may_open_with_a_code_span_or_a_link_or_after_a_parenthesis():
    text = "It is bound (as measured.) `mfu` overrides it. [The model](x.md) says so! Done"

    assert len(sentences(plain(text))) == 4


def test_fences_tables_headings_and_comments_are_not_prose_and_list_items_are_apart():
    page = "\n".join(
        [
            "# A title of many words that is no paragraph",
            "<!-- not run by tests/e2e/test_examples.py: a comment -->",
            "```sh",
            "curl -s $PLANNER_URL/healthz   # a comment of the block",
            "```",
            "| a | table |",
            "|---|---|",
            "A paragraph over",
            "two lines with [a link](https://example.com/a.b) and <https://example.com>:",
            "",
            "* an item",
            "  that goes on",
            "* another",
        ]
    )

    assert [(item.line, item.text) for item in prose(page)] == [
        (8, "A paragraph over two lines with a link and URL:"),
        (11, "an item that goes on"),
        (13, "another"),
    ]


def test_the_readme_fits_two_screens_and_says_how_to_run_test_and_read_on():
    readme = (ROOT / "README.md").read_text()

    assert len(readme.splitlines()) <= README_LINES, (
        f"README.md has {len(readme.splitlines())} lines: keep it to {README_LINES} (two screens) "
        "and move the rest to a page of docs/"
    )
    assert "make run" in readme
    assert "make test" in readme
    assert "](docs/index.md)" in readme, "README.md links to the docs site's home, docs/index.md"


@pytest.mark.parametrize("page", checked_pages(), ids=name)
def test_no_paragraph_or_list_item_is_a_wall(page):
    walls = [item for item in prose(page.read_text()) if item.words > PARAGRAPH_WORDS]

    assert not walls, f"{name(page)}: paragraphs or list items over {PARAGRAPH_WORDS} words:\n" + "\n".join(
        f"  line {item.line}: {item.words} words: {item.beginning()}" for item in walls
    )


@pytest.mark.parametrize("page", checked_pages(), ids=name)
def test_no_sentence_is_too_long_to_follow(page):
    long = [
        (item.line, sentence)
        for item in prose(page.read_text())
        for sentence in sentences(item.text)
        if len(sentence.split()) > SENTENCE_WORDS
    ]

    assert not long, f"{name(page)}: sentences over {SENTENCE_WORDS} words:\n" + "\n".join(
        f"  in the paragraph of line {line}: {len(sentence.split())} words: {sentence[:100]} ..."
        for line, sentence in long
    )


def test_every_page_of_the_site_is_in_its_navigation():
    config = (ROOT / "mkdocs.yml").read_text()
    nav = set(re.findall(r"[\w./-]+\.md\b", config.partition("\nnav:")[2]))
    pages = {str(page.relative_to(DOCS)) for page in checked_pages() if page.is_relative_to(DOCS)}

    assert not pages - nav, (
        f"pages of docs/ that mkdocs.yml's nav does not list, so no reader finds them: {sorted(pages - nav)}"
    )


def test_every_setting_the_server_and_the_command_line_read_is_on_the_configuration_page():
    """A variable the code reads and the reference does not name is a setting nobody can find."""
    page = (DOCS / "reference" / "configuration.md").read_text()
    server = re.findall(r'"([A-Z][A-Z0-9_]{3,})"', (ROOT / "service" / "infra" / "config.py").read_text())
    client = ROOT / "clients" / "python" / "planner_client"
    command_line = re.findall(
        r"\b(PLANNER_[A-Z_]+|XDG_CONFIG_HOME|COLUMNS)\b", "".join(f.read_text() for f in client.glob("*.py"))
    )
    completion = {"PLANNER_COMPLETE"}  # click's own, set by the script `planner completion` prints
    missing = {name for name in [*server, *command_line] if f"`{name}`" not in page} - completion
    assert server
    assert command_line
    assert not missing

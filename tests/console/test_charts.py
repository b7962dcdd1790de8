"""Server-side SVG charts: well-formed, accessible, escaped, robust to bad points, the right way up."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest
from markupsafe import Markup

from service.console import charts
from service.console.charts import Marker, Part, Series, bar, format_number, line_chart, stacked_bar

NS = "{http://www.w3.org/2000/svg}"
NASTY = '<script>&"'


def parse(markup: Markup) -> ET.Element:
    return ET.fromstring(str(markup))  # raises unless the output is well-formed XML


def chart(series, **options) -> Markup:
    arguments = {
        "chart_id": "c",
        "title": "Title",
        "description": "Description",
        "series": series,
        "x_label": "X",
        "y_label": "Y",
    }
    return line_chart(**(arguments | options))


def find(root: ET.Element, tag: str, cls: str | None = None) -> list[ET.Element]:
    return [e for e in root.iter(NS + tag) if cls is None or cls in e.get("class", "").split()]


def texts(root: ET.Element, cls: str | None = None) -> list[str]:
    return ["".join(e.itertext()) for e in find(root, "text", cls)]


def polyline_points(element: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in element.get("points").split())]


def series_groups(root: ET.Element) -> list[ET.Element]:
    """Each series' line."""
    return find(root, "g", "series")


def point_groups(root: ET.Element) -> list[ET.Element]:
    """Each series' markers, drawn after every line."""
    return find(root, "g", "points")


def test_the_output_is_one_accessible_svg():
    markup = chart([Series("a", [(1, 1), (2, 2)])], chart_id="loss")
    assert isinstance(markup, Markup)
    root = parse(markup)
    assert root.tag == NS + "svg"
    assert root.get("role") == "img"
    assert root.get("aria-labelledby") == "loss-title loss-desc"
    assert root.get("width") == "100%"
    assert root.get("viewBox") == "0 0 640 360"
    assert root.find(NS + "title").get("id") == "loss-title"
    assert root.find(NS + "title").text == "Title"
    assert root.find(NS + "desc").get("id") == "loss-desc"
    assert root.find(NS + "desc").text == "Description"


def test_each_series_draws_one_line_and_a_band_one_polygon_in_its_colour():
    series = [
        Series("a", [(1, 1), (2, 2), (3, 3)], band=[(1, 0.5, 1.5), (2, 1.5, 2.5), (3, 2.5, 3.5)]),
        Series("b", [(1, 2), (2, 3)]),
        Series("c", [(1, 3), (2, 1)]),
    ]
    root = parse(chart(series))
    groups = series_groups(root)
    assert len(groups) == 3
    assert [len(find(g, "polyline")) for g in groups] == [1, 1, 1]
    colours = [find(g, "polyline")[0].get("stroke") for g in groups]
    assert len(set(colours)) == 3
    bands = find(root, "polygon", "band")
    assert len(bands) == 1
    assert bands[0].get("fill") == colours[0]
    assert float(bands[0].get("fill-opacity")) == pytest.approx(0.18)
    assert len(bands[0].get("points").split()) == 6  # the high edge out, the low edge back
    assert find(groups[1], "polyline")[0].get("stroke-dasharray")
    assert not find(groups[0], "polyline")[0].get("stroke-dasharray")


def test_series_differ_by_marker_shape_too_and_the_legend_names_each():
    series = [Series(name, [(1, i), (2, i + 1)]) for i, name in enumerate(["alpha", "beta", "gamma"])]
    root = parse(chart(series))
    entries = find(root, "g", "legend-entry")
    assert [texts(entry)[0] for entry in entries] == ["alpha", "beta", "gamma"]
    # The path commands, without their numbers, tell the shapes apart: a circle, a square, a diamond.
    shapes = {re.sub(r"[-\d., ]", "", find(entry, "path")[0].get("d")) for entry in entries}
    assert len(shapes) == 3
    for group in point_groups(root):
        assert len(find(group, "path")) == 2  # a marker shape on each point of a short series


def marker(path: ET.Element) -> tuple[tuple[str, ...], bool]:
    """A marker as a person tells it apart from another, colour aside: its outline wherever it is drawn (the
    path with absolute points taken from its first), and whether it is filled or hollow."""
    outline, origin, command, coordinate = [], None, "", 0
    for token in re.findall(r"[A-Za-z]|-?\d+(?:\.\d+)?", path.get("d")):
        if token.isalpha():
            command, coordinate = token, 0
            outline.append(token)
            continue
        value = float(token)
        if command in "ML":  # absolute: where it is drawn, less where the outline starts
            origin = origin or [None, None]
            axis = coordinate % 2
            origin[axis] = value if origin[axis] is None else origin[axis]
            value -= origin[axis]
        coordinate += 1
        outline.append(str(round(value)))  # to the pixel: each coordinate was rounded where it is drawn
    return tuple(outline), path.get("fill") != "#fff"


def test_ten_series_each_have_a_colour_and_a_marker_of_their_own_in_the_legend_as_on_the_lines():
    """Ten: the laws page draws every published law and up to five fitted ones."""
    series = [Series(f"law {i}", [(1, i + 1), (2, i + 2)]) for i in range(10)]
    root = parse(chart(series))
    lines = [find(group, "polyline")[0].get("stroke") for group in series_groups(root)]
    markers = [marker(find(group, "path")[0]) for group in point_groups(root)]
    assert len(set(lines)) == 10
    assert len(set(markers)) == 10
    legend = find(root, "g", "legend-entry")
    assert [find(entry, "line")[0].get("stroke") for entry in legend] == lines
    assert [marker(find(entry, "path")[0]) for entry in legend] == markers


def marker_centre(path: ET.Element) -> tuple[float, float]:
    """Where a marker is drawn: the middle of the absolute points of its outline."""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", path.get("d"))]
    if "a" in path.get("d"):  # a circle: from its leftmost point, the radius across
        return numbers[0] + numbers[2], numbers[1]
    xs, ys = numbers[0::2], numbers[1::2]
    if "h" in path.get("d"):  # a square: from its top-left corner, one side across and down
        return xs[0] + numbers[2] / 2, ys[0] + numbers[2] / 2
    return (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2


def test_lines_that_coincide_still_show_each_series_by_its_dashes_and_markers_of_its_own():
    """The laws page's frontiers: laws that call for the same sizes draw one line over another. Each series
    has a dash pattern of its own, its markers sit on points no other series marks, and every marker is
    drawn above every line, so that no series hides another."""
    grid = [(10.0**k, 10.0 ** (k / 2)) for k in range(19, 44)]  # 25 points, as the frontier has
    names = [f"law {i}" for i in range(9)]
    root = parse(chart([Series(name, grid) for name in names], x_log=True, y_log=True))

    dashes = [find(group, "polyline")[0].get("stroke-dasharray") or "solid" for group in series_groups(root)]
    assert len(set(dashes)) == 9
    legend = find(root, "g", "legend-entry")
    assert [texts(entry)[0] for entry in legend] == names
    assert [find(entry, "line")[0].get("stroke-dasharray") or "solid" for entry in legend] == dashes
    centres = [[marker_centre(path) for path in find(group, "path")] for group in point_groups(root)]
    assert all(len(own) >= 2 for own in centres)
    everywhere = [centre for own in centres for centre in own]
    for a, b in itertools.combinations(everywhere, 2):
        assert math.dist(a, b) >= 10, (a, b)  # markers are 9 wide at most: none covers another
    drawn = list(root)
    last_line = max(drawn.index(group) for group in series_groups(root))
    assert last_line < min(drawn.index(group) for group in point_groups(root))


def label_box(text: ET.Element) -> tuple[float, float, float, float]:
    """Where a label of font-size 11 is drawn, generously: its width as charts.text_width measures it, 11
    above its baseline and 3.5 below."""
    x, y, width = float(text.get("x")), float(text.get("y")), charts.text_width("".join(text.itertext()))
    left = {"start": x, "middle": x - width / 2, "end": x - width}[text.get("text-anchor", "start")]
    return left, y - 11, left + width, y + 3.5


def crosses(segment: tuple[tuple[float, float], tuple[float, float]], box) -> bool:
    """Whether a straight segment passes through a box: sampled every tenth of a pixel along it."""
    (x0, y0), (x1, y1) = segment
    if max(x0, x1) < box[0] or min(x0, x1) > box[2] or max(y0, y1) < box[1] or min(y0, y1) > box[3]:
        return False  # wholly beside it
    steps = max(1, math.ceil(10 * math.dist((x0, y0), (x1, y1))))
    return any(
        box[0] <= x0 + (x1 - x0) * k / steps <= box[2] and box[1] <= y0 + (y1 - y0) * k / steps <= box[3]
        for k in range(steps + 1)
    )


# Curves a label beside a point of them has run into: a cost rising past the point (up and to the right of
# it, where the label went), falling, a V, and one that lies along the money limit's line.
CURVES = {
    "rising": [(1, 1), (2, 1.2), (4, 2), (8, 4), (16, 9), (32, 20)],
    "falling": [(1, 20), (2, 9), (4, 4), (8, 2), (16, 1.2), (32, 1)],
    "v": [(1, 9), (2, 5), (4, 2), (8, 1.5), (16, 5), (32, 12)],
    "along the limit": [(1, 5), (2, 5.1), (4, 5), (8, 5.05), (16, 5), (32, 5.1)],
}


@pytest.mark.parametrize("at", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", sorted(CURVES))
def test_labels_keep_off_the_lines_they_label(shape, at):
    points = CURVES[shape]
    x, y = points[at]
    root = parse(
        chart(
            [Series("Cost", points), Series("Ideal", [(p, points[0][1] * p) for p, _ in points[:3]])],
            x_log=True,
            markers=[Marker(x, y, "This plan: 1,024")],
            reference_lines=[(5, "Money limit")],
        )
    )
    segments = [
        pair
        for group in series_groups(root)
        for pair in itertools.pairwise(polyline_points(find(group, "polyline")[0]))
    ]
    labels = find(root, "text", "marker-label") + find(root, "text", "reference-label")
    assert len(labels) == 2
    frame = find(root, "rect", "frame")[0]
    left, top = float(frame.get("x")), float(frame.get("y"))
    right, bottom = left + float(frame.get("width")), top + float(frame.get("height"))
    for label in labels:
        box = label_box(label)
        assert left <= box[0] <= box[2] <= right, box
        assert top <= box[1] <= box[3] <= bottom, box
        assert not any(crosses(segment, box) for segment in segments), ("".join(label.itertext()), box)
    first, second = (label_box(label) for label in labels)
    assert min(first[2], second[2]) <= max(first[0], second[0]) or min(first[3], second[3]) <= max(
        first[1], second[1]
    )  # the two labels apart


def lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB colour such as #1f5fa8."""

    def linear(channel: int) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(colour[i : i + 2], 16)) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def test_no_two_palette_colours_look_alike():
    """A CIE76 colour difference of 2.3 is just noticeable; 20 is another colour, not a shade of one."""
    pairs = itertools.combinations(charts.PALETTE, 2)
    assert min(math.dist(lab(a), lab(b)) for a, b in pairs) >= 20


def test_a_long_series_draws_a_sample_of_marker_shapes():
    root = parse(chart([Series("a", [(x, x) for x in range(200)])]))
    (group,) = series_groups(root)
    assert len(polyline_points(find(group, "polyline")[0])) == 200
    (points,) = point_groups(root)
    assert 2 <= len(find(points, "path")) <= 12


def contrast_with_white(colour: str) -> float:
    def linear(channel: int) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    luminance = 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)
    return 1.05 / (luminance + 0.05)


@pytest.mark.parametrize("colour", charts.PALETTE)
def test_every_palette_colour_has_3_to_1_contrast_against_white(colour):
    assert contrast_with_white(colour) >= 3.0


@pytest.mark.parametrize("y_log", [False, True])
@pytest.mark.parametrize("x_log", [False, True])
def test_a_larger_value_is_drawn_higher_and_further_right(x_log, y_log):
    root = parse(chart([Series("a", [(1, 1), (10, 10), (100, 100)])], x_log=x_log, y_log=y_log))
    (line,) = find(root, "polyline")
    xs, ys = zip(*polyline_points(line), strict=True)
    assert xs[0] < xs[1] < xs[2]
    assert ys[0] > ys[1] > ys[2]  # SVG y grows downwards
    if x_log:  # equal ratios, equal distances
        assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.02)


def tick_positions(root: ET.Element, cls: str) -> list[tuple[str, float]]:
    axis = "y" if cls == "y-tick" else "x"
    return [("".join(e.itertext()), float(e.get(axis))) for e in find(root, "text", cls)]


def test_log_ticks_fall_at_powers_of_ten_equally_spaced():
    series = [Series("a", [(1e19, 1e8), (1e26, 3e12)])]
    root = parse(chart(series, x_log=True, y_log=True))
    for cls in ("x-tick", "y-tick"):
        ticks = tick_positions(root, cls)
        assert 3 <= len(ticks) <= 8
        powers = {format_number(10.0**k) for k in range(0, 40)}
        assert {label for label, _ in ticks} <= powers
        gaps = [b - a for (_, a), (_, b) in itertools.pairwise(ticks)]
        assert max(gaps) == pytest.approx(min(gaps), abs=0.02)
    assert [label for label, _ in tick_positions(root, "x-tick")] == [f"1e{k}" for k in range(19, 27)]


def test_log_ticks_are_thinned_to_at_most_8_over_many_decades():
    root = parse(chart([Series("a", [(1e6, 1), (1e35, 2)])], x_log=True))
    labels = [label for label, _ in tick_positions(root, "x-tick")]
    assert 3 <= len(labels) <= 8
    assert set(labels) <= {format_number(10.0**k) for k in range(0, 40)}


def test_log_ticks_use_1_2_5_steps_within_a_decade():
    root = parse(chart([Series("a", [(1, 2e20), (2, 8e20)])], y_log=True, y_format=lambda v: f"{v:.0e}"))
    labels = [label for label, _ in tick_positions(root, "y-tick")]
    assert len(labels) >= 3
    assert all(label[0] in "125" for label in labels)


@pytest.mark.parametrize(
    ("low", "high"), [(0, 1234), (0, 10), (1.9, 2.6), (-3, 7), (0.013, 0.019), (-50, -41)]
)
def test_linear_ticks_are_nice_1_2_5_steps_covering_the_data(low, high):
    root = parse(chart([Series("a", [(low, 3), (high, 17)])], x_format=lambda v: f"{v:.6g}"))
    values = [float(label) for label, _ in tick_positions(root, "x-tick")]
    assert 5 <= len(values) <= 8
    steps = {round(b - a, 9) for a, b in itertools.pairwise(values)}
    assert len(steps) == 1
    (step,) = steps
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in {1, 2, 5}
    assert values[0] <= low
    assert values[-1] >= high


@pytest.mark.parametrize("y_log", [False, True])
def test_a_single_point_still_draws_inside_the_frame(y_log):
    root = parse(chart([Series("a", [(5, 5)])], y_log=y_log))
    assert "No data to show" not in texts(root)
    assert len(tick_positions(root, "y-tick")) >= 2
    frame = find(root, "rect", "frame")[0]
    top, height = float(frame.get("y")), float(frame.get("height"))
    (shape,) = find(point_groups(root)[0], "path")
    y = float(shape.get("d").split()[1].split("a")[0])
    assert top < y < top + height


def test_caller_text_is_escaped_everywhere():
    markup = chart(
        [Series(NASTY, [(1, 1), (2, 2)])],
        chart_id="c",
        title=NASTY,
        description=NASTY,
        x_label=NASTY,
        y_label=NASTY,
        markers=[Marker(1, 1, NASTY)],
        reference_lines=[(1.5, NASTY)],
        x_ticks=[(1, NASTY), (2, "two")],
    )
    assert "<script>" not in markup
    root = parse(markup)
    assert root.find(NS + "title").text == NASTY
    assert root.find(NS + "desc").text == NASTY
    assert texts(root).count(NASTY) == 6  # series, marker, reference, tick and both axis titles
    assert "<script>" not in bar(chart_id="b", title=NASTY, parts=[(1, NASTY)], total=2, total_label=NASTY)


def test_points_that_cannot_be_drawn_are_skipped():
    nan, inf = float("nan"), float("inf")
    points = [(1, 1), (nan, 2), (2, inf), (3, -1), (4, 0), (-inf, 3), (5, 5)]
    markup = chart(
        [Series("a", points, band=[(1, nan, 2), (2, 1, 3), (3, -1, 4), (4, 3, 6)])],
        y_log=True,
        markers=[Marker(nan, 1, "m"), Marker(2, -3, "neg")],
        reference_lines=[(inf, "r"), (-2, "neg")],
    )
    lowered = markup.lower()
    assert "nan" not in lowered
    assert "inf" not in lowered
    root = parse(markup)
    (line,) = find(root, "polyline")
    assert len(polyline_points(line)) == 2  # (1, 1) and (5, 5)
    (band,) = find(root, "polygon", "band")
    assert len(band.get("points").split()) == 4  # the rows at x = 2 and x = 4
    assert not find(root, "circle", "marker")
    assert not find(root, "line", "reference")


@pytest.mark.parametrize(
    "series", [[], [Series("a", [])], [Series("a", [(float("nan"), 1), (1, float("inf"))])]]
)
def test_an_empty_chart_says_so_and_still_draws_its_frame(series):
    markup = chart(series, x_log=True, y_log=True)
    root = parse(markup)
    assert "No data to show" in texts(root, "empty")
    assert find(root, "rect", "frame")
    assert not find(root, "polyline")
    assert {"X", "Y"} <= set(texts(root, "axis-title"))
    assert "nan" not in markup.lower()


def test_a_marker_draws_a_filled_circle_and_its_label():
    root = parse(chart([Series("a", [(1, 1), (10, 3)])], markers=[Marker(4, 2, "This plan")]))
    (circle,) = find(root, "circle", "marker")
    assert circle.get("fill")
    assert "This plan" in texts(root)


def test_reference_lines_and_markers_widen_the_range():
    root = parse(
        chart(
            [Series("a", [(1, 1), (2, 2)])],
            reference_lines=[(1000, "Amount 1,000 USD")],
            markers=[Marker(50, 1, "far")],
        )
    )
    (line,) = find(root, "line", "reference")
    assert line.get("y1") == line.get("y2")
    frame = find(root, "rect", "frame")[0]
    top, left = float(frame.get("y")), float(frame.get("x"))
    right = left + float(frame.get("width"))
    assert float(line.get("y1")) >= top
    assert "Amount 1,000 USD" in texts(root, "reference-label")
    assert float(find(root, "circle", "marker")[0].get("cx")) <= right


def test_a_reference_line_at_the_top_of_the_data_is_drawn_inside_the_frame_not_on_its_border():
    """A budget's amount is often the largest figure of its burn chart, and a round one."""
    root = parse(chart([Series("a", [(0, 0), (1, 12_000_000)])], reference_lines=[(20_000_000, "Amount")]))
    (line,) = find(root, "line", "reference")
    (label,) = find(root, "text", "reference-label")
    frame = find(root, "rect", "frame")[0]
    top, bottom = float(frame.get("y")), float(frame.get("y")) + float(frame.get("height"))
    assert top + 8 <= float(line.get("y1")) <= bottom - 8
    assert float(label.get("y")) - 11 >= top  # the label (11 high) above its line, inside the frame too


def test_explicit_x_ticks_replace_the_automatic_ones():
    months = [(0, "Jan"), (1, "Feb"), (2, "Mar"), (3, "Apr")]
    root = parse(chart([Series("a", [(0, 10), (1, 30), (2, 35)])], x_ticks=months))
    ticks = tick_positions(root, "x-tick")
    assert [label for label, _ in ticks] == ["Jan", "Feb", "Mar", "Apr"]
    positions = [x for _, x in ticks]
    assert positions == sorted(positions)
    # The tick at x = 3 (past the data) is inside the frame: explicit ticks widen the range.
    frame = find(root, "rect", "frame")[0]
    assert positions[-1] <= float(frame.get("x")) + float(frame.get("width")) + 0.01


def test_output_is_deterministic_and_coordinates_have_at_most_2_decimals():
    def draw() -> Markup:
        return chart(
            [Series("a", [(1 / 3, 2 / 3), (10 / 7, 1e-3 / 7)], band=[(1 / 3, 0.1, 0.9), (10 / 7, 0, 0.01)])],
            markers=[Marker(1 / 3, 2 / 3, "m")],
        )

    markup = draw()
    assert markup == draw()
    root = parse(markup)
    coordinates = []
    for element in root.iter():
        for name in ("x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "width", "height", "points", "d"):
            coordinates += re.findall(r"-?\d+(?:\.\d+)?", element.get(name, ""))
    assert coordinates
    assert all(len(c.partition(".")[2]) <= 2 for c in coordinates)


def bar_parts(root: ET.Element) -> list[ET.Element]:
    return find(root, "rect", "part")


def test_a_bar_draws_parts_as_fractions_of_the_total():
    parts = [(300, "Committed"), (200, "Pending")]
    root = parse(bar(chart_id="u", title="Use", parts=parts, total=1000, total_label="Amount"))
    assert root.get("aria-labelledby") == "u-title u-desc"
    track = find(root, "rect", "track")[0]
    assert "over" not in track.get("class").split()
    widths = [float(part.get("width")) for part in bar_parts(root)]
    inner = float(track.get("width"))
    assert widths == pytest.approx([0.3 * inner, 0.2 * inner], abs=0.01)
    assert float(bar_parts(root)[1].get("x")) == pytest.approx(float(track.get("x")) + widths[0], abs=0.01)
    assert "over budget" not in "".join(root.itertext())
    assert {"Committed", "Pending", "Amount"} <= set(texts(root))


def bar_rows(width: int) -> tuple[ET.Element, float, float]:
    """A budget's bar with long amounts, and the baselines of its two labels: the part's, the total's."""
    committed, amount = "Committed 2,670,224.39 USD", "Amount 20,000,000.00 USD"
    root = parse(
        bar(chart_id="u", title="Use", parts=[(2.67, committed)], total=20, total_label=amount, width=width)
    )
    rows = {"".join(e.itertext()): float(e.get("y")) for e in find(root, "text")}
    return root, rows[committed], rows[amount]


def test_a_bar_puts_its_total_on_a_row_of_its_own_when_it_would_run_into_the_parts():
    root, part_row, total_row = bar_rows(width=320)
    assert total_row >= part_row + 11  # a line of 11-pixel text lower
    assert total_row <= float(root.get("viewBox").split()[3])  # and still inside the picture


def test_a_bar_keeps_its_labels_on_one_row_where_there_is_room():
    root, part_row, total_row = bar_rows(width=640)
    assert total_row == part_row
    assert root.get("viewBox") == "0 0 640 56"


def test_a_bar_clips_an_overrun_and_marks_it():
    markup = bar(chart_id="u", title="Use", parts=[(1300, "Committed")], total=1000, total_label="Amount")
    root = parse(markup)
    track = find(root, "rect", "track")[0]
    assert "over" in track.get("class").split()
    (part,) = bar_parts(root)
    assert float(part.get("width")) == pytest.approx(float(track.get("width")))
    assert find(root, "rect", "overrun")
    assert "over budget" in "".join(root.itertext())
    assert "over budget" in root.find(NS + "desc").text


def test_a_bar_lists_a_part_of_zero_without_drawing_it():
    markup = bar(chart_id="u", title="Use", parts=[(0, "Committed 0.00 USD")], total=10, total_label="Amount")
    root = parse(markup)
    assert not bar_parts(root)
    assert "Committed 0.00 USD" in texts(root)


@pytest.mark.parametrize("total", [0, -5, float("nan")])
def test_a_bar_without_a_positive_total_is_empty_with_text(total):
    markup = bar(chart_id="u", title="Use", parts=[(300, "Committed")], total=total, total_label="No amount")
    root = parse(markup)
    assert not bar_parts(root)
    assert texts(root, "empty")
    assert "nan" not in markup.lower()


def stacked(parts, width=640) -> ET.Element:
    return parse(
        stacked_bar(
            chart_id="s", title="Step", description="Seconds", parts=parts, x_label="Seconds", width=width
        )
    )


def test_a_stacked_bar_lays_its_parts_end_to_end_on_a_scale_from_zero():
    root = stacked([Part(3, "Compute", 0), Part(1, "Comms", 2)])
    assert root.get("aria-labelledby") == "s-title s-desc"
    first, second = bar_parts(root)
    assert float(second.get("x")) == pytest.approx(
        float(first.get("x")) + float(first.get("width")), abs=0.01
    )
    assert float(first.get("width")) == pytest.approx(3 * float(second.get("width")), abs=0.02)
    ticks = texts(root, "x-tick")
    assert ticks[0] == "0"
    assert "Seconds" in texts(root, "axis-title")
    # The scale ends at a tick at or past the total: the bar ends where the total is read.
    assert float(ticks[-1]) >= 4


def test_each_part_keeps_its_colour_and_one_that_takes_no_time_is_left_out():
    root = stacked(
        [Part(3, "Compute", 0), Part(0, "Bubble", 4), Part(float("nan"), "Odd", 5), Part(1, "Comms", 2)]
    )
    assert [part.get("fill") for part in bar_parts(root)] == [charts.PALETTE[0], charts.PALETTE[2]]
    entries = find(root, "g", "legend-entry")
    assert [texts(entry)[0] for entry in entries] == ["Compute", "Comms"]
    assert [find(entry, "rect", "swatch")[0].get("fill") for entry in entries] == [
        charts.PALETTE[0],
        charts.PALETTE[2],
    ]


def test_a_stacked_bars_legend_wraps_into_rows_inside_the_picture():
    parts = [Part(i + 1, f"Part number {i} takes {i + 1}.5 s (12%)", i) for i in range(8)]
    root = stacked(parts, width=480)
    width, height = (float(v) for v in root.get("viewBox").split()[2:])
    rows = sorted({float(find(entry, "text")[0].get("y")) for entry in find(root, "g", "legend-entry")})
    assert len(rows) > 1
    assert rows[-1] <= height
    for entry in find(root, "g", "legend-entry"):
        label = find(entry, "text")[0]
        assert float(label.get("x")) + charts.text_width(texts(entry)[0]) <= width


def test_a_stacked_bar_escapes_its_text_and_without_parts_says_so():
    root = stacked([Part(1, NASTY, 0)])
    assert NASTY in texts(root)
    empty = stacked([Part(0, "Nothing", 0)])
    assert not bar_parts(empty)
    assert texts(empty, "empty")


def test_a_marker_at_the_top_of_a_chart_is_labelled_below_it_clear_of_the_legend():
    series = [Series("a", [(1, 1), (2, 2), (3, 3)])]
    root = parse(chart(series, markers=[Marker(3, 3, "Top")]))
    point = find(root, "circle", "marker")[0]
    label = next(e for e in find(root, "text") if "".join(e.itertext()) == "Top")
    assert float(label.get("y")) > float(point.get("cy"))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (950, "950"),
        (1234, "1.2k"),
        (12_345, "12k"),
        (999_600, "1M"),
        (7e7, "70M"),
        (7e10, "70B"),
        (1.4e12, "1.4T"),
        (3.2e12, "3.2T"),
        (1e21, "1e21"),
        (5.76e23, "5.8e23"),
        (-2500, "-2.5k"),
        (2.05, "2.05"),
        (0.25, "0.25"),
        (0.0004, "4e-4"),
        (float("nan"), "n/a"),
        (float("-inf"), "n/a"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


def test_a_range_that_ends_on_a_power_of_ten_by_rounding_gains_no_decade():
    series = Series("a", [(1e19 * (1 - 1e-12), 1.0), (1e26 * (1 + 1e-12), 2.0)])
    root = parse(chart([series], x_log=True))
    labels = texts(root, "x-tick")
    assert labels[0] == "1e19"
    assert labels[-1] == "1e26"


# --- Planned against actual -------------------------------------------------------------------------------


def planned_actual(stacks, periods=("2026-01", "2026-02"), **options) -> ET.Element:
    arguments = {
        "chart_id": "pa",
        "title": "Planned against actual",
        "description": "Per month, planned beside actual.",
        "periods": periods,
        "stacks": stacks,
        "y_label": "Money (USD)",
    }
    return parse(charts.planned_actual_bars(**(arguments | options)))


def heights(root: ET.Element, kind: str, period: str) -> list[float]:
    return [
        float(rect.get("height")) for rect in find(root, "rect", kind) if rect.get("data-period") == period
    ]


def test_each_period_has_a_pale_planned_bar_beside_a_solid_actual_one_stacked_by_group():
    root = planned_actual(
        [
            charts.Stack("alpha", planned=[100.0, 0.0], actual=[60.0, 30.0], colour=0),
            charts.Stack("beta", planned=[50.0, 0.0], actual=[90.0, 0.0], colour=1),
        ]
    )

    assert root.get("role") == "img"
    assert texts(root, "x-tick") == ["2026-01", "2026-02"]
    january_planned, january_actual = heights(root, "planned", "2026-01"), heights(root, "actual", "2026-01")
    assert len(january_planned) == len(january_actual) == 2  # a part per group
    assert sum(january_planned) == pytest.approx(sum(january_actual), abs=0.02)  # 150 each (2-decimal SVG)
    assert january_planned[0] == pytest.approx(2 * january_planned[1], abs=0.02)  # alpha 100, beta 50
    assert heights(root, "planned", "2026-02") == []  # nothing planned takes no space
    assert heights(root, "actual", "2026-02") == [pytest.approx(january_actual[0] / 2, abs=0.02)]
    planned_rect = find(root, "rect", "planned")[0]
    assert planned_rect.get("fill-opacity") == charts.PLANNED_OPACITY
    assert find(root, "rect", "actual")[0].get("fill-opacity") is None
    planned_x = float(planned_rect.get("x"))
    assert planned_x < float(find(root, "rect", "actual")[0].get("x"))  # planned on the left
    assert texts(root)[-4:] == ["planned (pale)", "actual (solid)", "alpha", "beta"]


def test_a_planned_actual_chart_with_nothing_says_so_and_escapes_its_text():
    root = planned_actual(
        [charts.Stack(NASTY, planned=[0.0, math.nan], actual=[-5.0, math.inf], colour=0)],
        periods=(NASTY, "b"),
        title=NASTY,
    )

    assert texts(root, "empty") == ["Nothing planned or spent"]
    assert find(root, "rect", "planned") == find(root, "rect", "actual") == []
    assert root.find(NS + "title").text == NASTY
    assert NASTY not in texts(root)[-3:]  # a group with nothing is left out of the legend


def test_many_periods_label_only_as_many_as_fit():
    days = [f"2026-01-{day:02d}" for day in range(1, 32)]
    root = planned_actual([charts.Stack("a", [1.0] * 31, [2.0] * 31, 0)], periods=days)

    labels = texts(root, "x-tick")
    assert labels[0] == "2026-01-01"
    assert 1 < len(labels) < 31
    positions = [float(text.get("x")) for text in find(root, "text", "x-tick")]
    gaps = [b - a for a, b in itertools.pairwise(positions)]
    assert min(gaps) >= charts.text_width("2026-01-01")  # never overlapping

"""`planner`: the Compute Planner API from a shell, on top of planner_client.PlannerClient.

    export PLANNER_URL=http://127.0.0.1:8000 PLANNER_API_KEY=cpk_...
    planner allocate --pf-days 6000
    planner estimate --params 70e9 --tokens 1.4e12 --hardware h100-sxm --days 30 --layers 80 --d-model 8192 \
        --heads 64 --kv-heads 8 --sequence-length 8192
    planner layout --params 70e9 --tokens 1.4e12 --hardware h100-sxm --accelerators 1024 --tensor-parallel 8
    planner plan create --organization acme --budget-id <id> --pf-days 6000 --hardware h100-sxm \
        --accelerators 1024
    planner plan commit <plan id>
    planner report costs --from 2026-01-01T00:00:00Z --to 2027-01-01T00:00:00Z --group-by budget --output csv
    planner config set --profile prod url https://planner.example.com    # profiles: planner config --help

Results print as tables in the units people read (65.7B parameters, 80 GB, 989.4 TFLOP/s, 23.7 days,
1,000,000.00 USD), fitted to 100 columns or the terminal; `--output json` prints the API's JSON instead,
`--output csv` the table's rows with raw values and `--get FIELD` one field, for scripts. A refusal is one
line naming what was refused, the problem and its fields, with an exit status by its class (planner --help).
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from datetime import time as dt_time
from decimal import Decimal, InvalidOperation
from itertools import islice
from pathlib import Path
from typing import Any

import click
import requests
from click.core import ParameterSource
from click.shell_completion import get_completion_class
from tabulate import tabulate

from planner_client import __version__
from planner_client.client import DEFAULT_URL, PlannerClient, ProblemError
from planner_client.profiles import DEFAULT_PROFILE, KEYS, OUTPUTS, Config, ConfigError, config_path, masked

LIST_LIMIT = 20
Json = dict[str, Any]


# --- Request fields as options ------------------------------------------------------------------------------
# (API field, click type, help). An option is the field's name with dashes; a bool is a --x/--no-x pair.

BUDGET_FIELDS = (
    ("flops", float, "Compute budget in FLOPs, e.g. 1e23."),
    ("pf_days", float, "Compute budget in PF-days (8.64e19 FLOPs each), e.g. 6000."),
    ("target_loss", float, "Reach this loss (nats/token) with the least compute; needs --law."),
    ("cost", str, "Money budget, a decimal such as 2000000.00; with --currency and --hardware."),
    ("accelerator_hours", float, "Accelerator-hours budget; with --hardware."),
    ("days", float, "Wall-clock deadline in days; with --hardware and --accelerators."),
)
RULE_FIELDS = (
    ("law", str, "Scaling law slug (planner law list), e.g. chinchilla-2022; instead of --tokens-per-param."),
    ("tokens_per_param", float, "Fixed tokens per parameter; default 20 when no --law is given."),
    ("unique_tokens", float, "Unique tokens available: allocates for repeated data (data-constrained)."),
    (
        "inference_tokens",
        float,
        "Lifetime inference tokens: inference-aware allocation, of a budget or of --target-loss.",
    ),
    (
        "inference_hardware",
        str,
        "Hardware profile slug that serves the inference tokens, for their cost (default: --hardware).",
    ),
    ("inference_batch", int, "Sequences decoded together when serving the inference tokens; default 1."),
)
CLUSTER_FIELDS = (
    ("hardware", str, "Hardware profile slug (planner hardware list), e.g. h100-sxm."),
    ("accelerators", int, "Number of accelerators; left out, the planner chooses the count."),
    (
        "mfu",
        float,
        "Model FLOPs utilisation, in (0, 1]: overrides the cluster model, which otherwise predicts it.",
    ),
    ("precision", str, "Training precision: fp32, tf32, bf16 (default), fp16 or fp8."),
    ("price_per_hour", str, "Price per accelerator-hour, instead of the hardware's; with --currency."),
    ("currency", str, "ISO 4217 currency of --cost or --price-per-hour, e.g. USD."),
    ("optimizer", str, "Optimizer whose states count in memory: adam (default), adamw or sgd-momentum."),
    (
        "framework",
        str,
        "Training framework the layout search stays inside: megatron-core, megatron-lm, deepspeed, fsdp, "
        "torchtitan, maxtext or dualpipe; default generic (what they all run).",
    ),
)
MODEL_FIELDS = (
    ("params", float, "Model parameters, for a model already chosen (with --tokens), e.g. 7e9."),
    ("tokens", float, "Training tokens, for a model already chosen (with --params), e.g. 2e12."),
)
# A mixture of experts given by its parameters alone (a shape gives its own): estimates and plans.
ESTIMATE_MODEL_FIELDS = (
    *MODEL_FIELDS,
    (
        "active_params",
        float,
        "Of a mixture of experts without a shape: the parameters a token passes through, e.g. 37e9 (--params "
        "is every expert's, and greater).",
    ),
)
# The cluster model's inputs, as `planner estimate` and `planner layout` take them: the estimate's own
# cluster fields, then the model's shape, its layout and what goodput needs, sent as the request's `shape`,
# `layout` and `reliability` objects (allocate and plan take the layout's, in `layout` too: never the
# top-level zero_stage, tensor_parallel, recomputation and sequence_parallel the API keeps for old callers).
ESTIMATE_CLUSTER_FIELDS = (
    *CLUSTER_FIELDS[:2],  # hardware, accelerators
    (
        "days",
        float,
        "A deadline in days, instead of --accelerators: the planner chooses the fewest accelerators that "
        "finish by it (with neither, the cheapest run within a year).",
    ),
    (
        "max_accelerators",
        int,
        "The most accelerators the planner may choose when --accelerators is left out; default 32768.",
    ),
    *CLUSTER_FIELDS[2:],
)
SHAPE_FIELDS = (
    (
        "layers",
        int,
        "Transformer layers, e.g. 126. A shape needs --layers, --d-model, --heads, --sequence-length.",
    ),
    ("d_model", int, "Model width, e.g. 16384."),
    ("heads", int, "Attention heads, e.g. 128; must divide --d-model."),
    (
        "kv_heads",
        int,
        "Key/value heads (grouped-query attention), e.g. 8; must divide --heads; default --heads.",
    ),
    ("ffn", int, "Inner width of the MLP, e.g. 53248; default 4 x --d-model."),
    ("activation", str, "MLP activation: gelu (two matrices, default) or swiglu (three, as in Llama)."),
    ("vocabulary", int, "Vocabulary of the embedding and output layers, e.g. 128256; default not counted."),
    ("sequence_length", int, "Tokens per sequence, e.g. 8192."),
    ("head_dim", int, "Width of an attention head, e.g. 128; default --d-model / --heads."),
    # A mixture of experts (each of these needs --experts) and multi-head latent attention.
    ("experts", int, "Routed experts per mixture-of-experts layer, e.g. 256; left out, the model is dense."),
    ("experts_per_token", int, "Routed experts each token goes to (top-k), e.g. 8; needed with --experts."),
    ("shared_experts", int, "Experts every token goes to besides the routed ones; default 0."),
    ("expert_ffn", int, "Inner width of one expert's MLP, e.g. 2048; default --ffn."),
    ("moe_every", int, "Every k-th layer after the dense ones has experts; default 1."),
    ("dense_layers", int, "First layers that keep a dense MLP (DeepSeek-V3: 3); default 0."),
    (
        "capacity_factor",
        float,
        "Tokens of the busiest expert-parallel rank over the mean, at least 1; default 1 (balanced).",
    ),
    (
        "kv_lora_rank",
        int,
        "Multi-head latent attention (DeepSeek-V2): width of the key/value latent, e.g. 512; not with "
        "--kv-heads.",
    ),
    ("q_lora_rank", int, "Latent attention: width of the query latent, e.g. 1536; default none."),
    ("rope_head_dim", int, "Latent attention: rotary channels per head; default 64."),
    ("mtp_depth", int, "Multi-token prediction modules (DeepSeek-V3: 1); default 0."),
)
LAYOUT_FIELDS = (
    ("tensor_parallel", int, "Tensor-parallel degree; must divide the heads and the KV heads."),
    ("pipeline_parallel", int, "Pipeline stages; at most the layers."),
    ("data_parallel", int, "Data-parallel replicas."),
    ("context_parallel", int, "Context-parallel degree; default 1 (not searched)."),
    ("micro_batch", int, "Sequences per micro-batch; must divide the sequences per replica."),
    ("global_batch", int, "Sequences per step; default DeepSeek LLM's batch for the run's compute."),
    ("interleave", int, "Virtual pipeline stages per accelerator (interleaved 1F1B)."),
    ("recomputation", str, "Activation recomputation: none, selective or full."),
    ("zero_stage", int, "ZeRO stage, 0 to 3 (3 is FSDP-like): how model states are sharded."),
    ("sequence_parallel", bool, "Sequence parallelism with tensor parallelism (default on)."),
    ("flash_attention", bool, "FlashAttention-style attention, no s² scores in memory (default on)."),
    (
        "expert_parallel",
        int,
        "Data-parallel ranks a mixture-of-experts layer's experts are spread over; divides the experts and "
        "the data-parallel degree.",
    ),
    (
        "expert_overlap",
        bool,
        "The experts' all-to-all runs under another micro-batch's compute (DeepSeek-V3's DualPipe).",
    ),
    (
        "tensor_parallel_overlap",
        bool,
        "Tensor-parallel collectives pipelined with the GEMMs (default: what the framework does).",
    ),
)
RELIABILITY_FIELDS = (
    (
        "checkpoint_write_gb_per_second",
        float,
        "Write bandwidth of the checkpoint storage in GB/s, all writers together; default 100.",
    ),
    ("restart_seconds", float, "Seconds from a failure to training again; default 600."),
    (
        "run_overhead",
        float,
        "Share of the wall-clock time whole runs lose beyond failures and checkpoints; default 0.28.",
    ),
)
# The request's objects that options fill, field by field (options win over --body's).
NESTED_FIELDS = {"shape": SHAPE_FIELDS, "layout": LAYOUT_FIELDS, "reliability": RELIABILITY_FIELDS}
PLAN_FIELDS = (
    ("name", str, "A name to find the plan by."),
    (
        "budget_id",
        str,
        "The budget (planner budget list) the plan is charged to when you commit it: a plan without one "
        "cannot be committed.",
    ),
    ("start_at", str, "When the run starts, ISO 8601 (default now); within the budget's period."),
)
PLAN_ORGANIZATION = (("organization", str, "The organisation's slug (planner organization list)."),)
SPEND_REMAINING = (
    "Make the budget's remaining amount (--budget-id's) the money to spend, instead of --cost: the "
    'API\'s "budget": "remaining".'
)
HARDWARE_FIELDS = (
    ("name", str, "Name shown in lists, e.g. 'H100 (negotiated)'."),
    ("vendor", str, "Vendor, e.g. NVIDIA."),
    ("memory_bytes", float, "Memory of one accelerator in bytes, e.g. 80e9."),
    ("memory_bandwidth_bytes_per_second", float, "Memory bandwidth of one accelerator, e.g. 3.35e12."),
    ("interconnect", str, "Scale-up interconnect, e.g. 'NVLink 4'."),
    ("interconnect_bandwidth_bytes_per_second", float, "Its bandwidth, bidirectional total, e.g. 900e9."),
    ("tdp_watts", int, "Thermal design power in watts."),
    (
        "accelerators_per_node",
        int,
        "Accelerators sharing the scale-up domain as installed, e.g. 8 (DGX/HGX).",
    ),
    (
        "scale_up_gb_per_second",
        float,
        "Scale-up link per accelerator in GB/s, ONE direction, e.g. 450 (NVLink 4).",
    ),
    (
        "scale_out_gb_per_second",
        float,
        "Network between nodes per accelerator in GB/s, ONE direction, e.g. 50.",
    ),
    ("failures_per_accelerator_hour", float, "Unexpected interruptions per accelerator-hour, e.g. 1.97e-5."),
    ("source", str, "Where the figures come from, e.g. a datasheet."),
    ("note", str, "Anything worth knowing about the profile."),
    ("price_per_hour", str, "Price per accelerator-hour, a decimal such as 2.10; with --currency."),
    ("currency", str, "ISO 4217 currency of the price, e.g. USD."),
    ("price_as_of", str, "When the price was quoted: YYYY, YYYY-MM or YYYY-MM-DD."),
    ("price_source", str, "Where the price comes from."),
)
BUDGET_ACCOUNT_FIELDS = (
    ("name", str, "Name of the budget, e.g. 'Q1 pretraining'."),
    ("amount", str, "Money the budget holds, a decimal such as 2500000.00."),
    ("currency", str, "ISO 4217 currency of the amount, e.g. USD."),
    ("period_start", str, "Start of its period (inclusive), ISO 8601 with an offset."),
    ("period_end", str, "End of its period (exclusive), ISO 8601 with an offset."),
    ("max_flops", float, "Cap on the training FLOPs committed against it."),
    ("max_accelerator_hours", float, "Cap on the accelerator-hours committed against it."),
    (
        "approval_above",
        str,
        "Plans costing more than this wait, when committed, for a finance or admin key's approval.",
    ),
)
BUDGET_ORGANIZATION = (("organization", str, "Slug of the organisation the budget belongs to."),)
BODY_HELP = "A JSON file (- for stdin) of request fields the options do not cover, e.g. shape; options win."
LABEL_HELP = "A label KEY=VALUE; repeatable."
IDEMPOTENCY_HELP = "Idempotency-Key for the request (default: a fresh one, reused by the client's retries)."
LIMIT_HELP = f"At most this many (default {LIST_LIMIT})."
body_option = click.option(
    "--body", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path), help=BODY_HELP
)
limit_option = click.option("--limit", type=click.IntRange(1), default=LIST_LIMIT, help=LIMIT_HELP)


METAVARS = {
    "budget_id": "ID",
    **dict.fromkeys(("start_at", "period_start", "period_end"), "TIME"),
    **dict.fromkeys(("organization", "hardware", "law"), "SLUG"),
    **dict.fromkeys(("cost", "amount", "price_per_hour", "approval_above"), "AMOUNT"),
    "currency": "CODE",
    **dict.fromkeys(
        ("scale_up_gb_per_second", "scale_out_gb_per_second", "checkpoint_write_gb_per_second"), "GB/S"
    ),
    float: "NUMBER",
}


def fields_options(*field_sets: Sequence[tuple[str, Any, str]]) -> Callable:
    """Decorate a command with an option for each request field."""

    def decorate(function: Callable) -> Callable:
        for name, kind, helps in reversed([field for fields in field_sets for field in fields]):
            flag = name.replace("_", "-")
            if kind is bool:
                option = click.option(f"--{flag}/--no-{flag}", name, default=None, help=helps)
            else:
                metavar = METAVARS.get(name, METAVARS.get(kind))
                option = click.option(f"--{flag}", name, type=kind, metavar=metavar, help=helps)
            function = option(function)
        return function

    return decorate


def request_body(options: dict[str, Any], *field_sets, body: Path | None = None) -> Json:
    """The request: --body's fields, then every field option given."""
    request = {}
    if body:
        with click.open_file(str(body)) as file:
            request = json.load(file)
    names = {name for fields in field_sets for name, _, _ in fields}
    request.update({name: value for name, value in options.items() if name in names and value is not None})
    return request


def labels(pairs: Sequence[str]) -> dict[str, str]:
    split = [pair.partition("=") for pair in pairs]
    if any(not sep for _, sep, _ in split):
        raise click.BadParameter("takes KEY=VALUE", param_hint="--label")
    return {key: value for key, _, value in split}


# --- What every command shares: its settings, the client, and how the answer is printed ---------------------

# Where a setting comes from when no option gives it (planner --help says the whole order).
ENVIRONMENT = {"url": "PLANNER_URL", "api_key": "PLANNER_API_KEY", "output": "PLANNER_OUTPUT"}
PROFILE_ENVIRONMENT = "PLANNER_PROFILE"
NO_KEY = "none given"


@dataclass
class Settings:
    """The settings a command runs with: what its options and the environment gave (`given`: a setting's value
    and where it came from), else the profile's in the config file, read when a command first needs it."""

    given: dict[str, tuple[str, str]]
    profile: str | None = None  # --profile or PLANNER_PROFILE
    get: str | None = None
    _config: Config | None = None
    _key: tuple[str | None, str] | None = None
    _client: PlannerClient | None = None

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = Config.read(config_path())
        return self._config

    def setting(self, name: str) -> tuple[str | None, str]:
        """A setting's value (None: not set) and where it came from: an option, a variable or a profile."""
        if name in self.given:
            return self.given[name]
        config = self.config
        profile, value = config.lookup(config.selected(self.profile), name)
        return value, f"profile {profile} of {config.path}"

    @property
    def output(self) -> str:
        return self.setting("output")[0] or "table"

    @property
    def table(self) -> bool:
        """Whether the answer prints for people: a table, not JSON, csv or one field."""
        return self.output == "table" and not self.get

    def api_key(self) -> tuple[str | None, str]:
        """The API key and where it came from (a profile's api_key_command is run for it, once)."""
        if self._key is None:
            key, source = self.setting("api_key")
            if key is None and "api_key" not in self.given:
                command, source = self.setting("api_key_command")
                key = None if command is None else key_from_command(command, source)
            self._key = (key, source if key is not None else NO_KEY)
        return self._key

    @property
    def client(self) -> PlannerClient:
        if self._client is None:
            # A person waits at the terminal: a server that is down is said at once, not after retries.
            url = self.setting("url")[0] or DEFAULT_URL
            self._client = PlannerClient(url, self.api_key()[0], connect_retries=0)
        return self._client


def _profile_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """The config file's profiles, for the shell's completion of a profile's name."""
    try:
        names = Config.read(config_path()).profiles
    except ConfigError:  # nothing to offer from a file that cannot be read
        return []
    return [name for name in [*names, DEFAULT_PROFILE] if name.startswith(incomplete)]


def key_from_command(command: str, source: str) -> str:
    """What a profile's api_key_command prints (a password manager's `pass show planner/prod`), run without a
    shell; a command that fails says so in one line."""
    try:
        ran = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, ValueError, subprocess.TimeoutExpired) as error:
        raise click.ClickException(f"api_key_command of {source}: {error}") from error
    key = ran.stdout.strip()
    if ran.returncode != 0 or not key:
        said = (ran.stderr.strip().splitlines() or [f"exit status {ran.returncode}, no key printed"])[-1]
        raise click.ClickException(f"api_key_command of {source}: {said}")
    return key


def settings() -> Settings:
    return click.get_current_context().find_object(Settings)


OUTPUT_HELP = (
    "How the answer prints: table (for people), json (the API's) or csv; default: as planner's --output, "
    "PLANNER_OUTPUT or the profile says, else table."
)
JSON_HELP = "The same as --output json."
GET_HELP = "Print only this field of the answer (of each item of a list), e.g. id; dotted for a nested one."


def output_given(ctx: click.Context, output: str | None, as_json: bool) -> tuple[str, str] | None:
    """The output a command line asks for with --output or --json (the same as --output json), if it does."""
    from_option = output is not None and ctx.get_parameter_source("output") is ParameterSource.COMMANDLINE
    if as_json and from_option and output != "json":
        raise click.UsageError(f"--json is --output json: give it or --output {output}, not both")
    if as_json:
        return "json", "--json"
    if output is None:
        return None
    return output, "--output" if from_option else ENVIRONMENT["output"]


class Command(click.Command):
    """A command whose answer prints as a table, JSON or csv (--output, beside the one before the command's
    name), or one field (--get); the API's refusals and the server's silence said in one line."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.short_help = self.short_help or summary(self.help, clause=True)
        self.params += [
            click.Option(["-o", "--output"], type=click.Choice(OUTPUTS), help=OUTPUT_HELP),
            click.Option(["--json", "as_json"], is_flag=True, help=JSON_HELP),
            click.Option(["--get"], metavar="FIELD", help=GET_HELP),
        ]

    def invoke(self, ctx: click.Context) -> Any:
        chosen = ctx.find_object(Settings)
        if output := output_given(ctx, ctx.params.pop("output"), ctx.params.pop("as_json")):
            chosen.given["output"] = output
        chosen.get = ctx.params.pop("get") or chosen.get
        try:
            return super().invoke(ctx)
        except ProblemError as error:
            raise Problem(error, subject(ctx), chosen) from error
        except ConfigError as error:
            raise ConfigProblem(str(error)) from error
        except requests.RequestException as error:
            raise click.ClickException(_unreachable(chosen.client, error)) from error
        except BrokenPipeError:  # the output's reader went away: `main` ends quietly
            raise
        except (OSError, ValueError) as error:  # a --body or --runs file that cannot be read
            raise click.ClickException(str(error)) from error


class Group(click.Group):
    command_class = Command
    group_class = type  # subgroups are Groups, their commands Commands

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.short_help = self.short_help or summary(self.help, clause=False)


# The end of a help's first clause: a colon, a semicolon or a full stop before a space (not e.g.'s).
CLAUSE_END = re.compile(r"(?<!e\.g)(?<!i\.e)[.:;](?=\s|$)")
SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.(?=\s|$)")


def summary(help_text: str | None, *, clause: bool) -> str | None:
    """What a list of commands says of one (planner --help, the docs' reference): its help's first sentence,
    or of a command its first clause (`Budget BUDGET_ID now and at completion`), whole rather than cut at 45
    characters as click would."""
    if not help_text:
        return None
    paragraph = " ".join(inspect.cleandoc(help_text).split("\n\n")[0].split())
    ends = [end.start() for end in (CLAUSE_END if clause else SENTENCE_END).finditer(paragraph)]
    return paragraph[: next((end for end in ends if end >= 20), len(paragraph))].rstrip(".")


def _unreachable(client: PlannerClient, error: requests.RequestException) -> str:
    """One line on why the server did not answer, instead of the transport's chain of exceptions."""
    where = client.base_url
    if isinstance(error, requests.ConnectTimeout):
        return (
            f"cannot reach {where}: no answer within {client.connect_timeout:g} s (set PLANNER_URL or --url)"
        )
    if isinstance(error, requests.ReadTimeout):
        return f"{where} took the request but did not answer within {client.timeout:g} s"
    if isinstance(error, requests.ConnectionError):
        return f"cannot reach {where}: is the server running? (set PLANNER_URL or --url to another)"
    return f"cannot reach {where}: {type(error).__name__}"


# --- Printing an answer: a table, JSON, csv, or one field ---------------------------------------------------


@dataclass(frozen=True)
class Row:
    """A line of a view of one answer: its label and text as the table shows them, and the answer's field
    (dotted) and raw value they show, as csv gives them; `in_table` false: csv's alone (a money row's
    currency, which the table writes beside the amount)."""

    label: str
    text: str
    field: str
    value: Any
    in_table: bool = True


Rows = list[Row]


def scripted(body: Any) -> bool:
    """Print the answer as a script asked for it, one field (--get) or its JSON, if it did; say whether."""
    chosen = settings()
    if chosen.get:
        for item in body if isinstance(body, list) else [body]:
            click.echo(_text(_field(item, chosen.get)))
        return True
    if chosen.output == "json":
        click.echo(json.dumps(body, indent=2))
        return True
    return False


def show(body: Json, rows: Callable[[Json], Rows] | None = None) -> None:
    """One answer: its rows (default: every field) as a table of names and values or as `field,value` csv;
    its JSON, or one field of it."""
    if scripted(body):
        return
    shown = (rows or flat_rows)(body)
    if settings().output == "csv":
        click.echo(csv_text(["field", "value"], [[row.field, row.value] for row in shown]), nl=False)
    else:
        click.echo(key_value_table([(row.label, row.text) for row in shown if row.in_table]))


def show_list(
    items: Iterable[Json],
    columns: Sequence[str],
    headers: Mapping[str, str] | None = None,
    *,
    optional: Sequence[str] = (),
) -> None:
    """A list's items: a table of `columns` (headed by `headers`' name for them or COLUMN_HEADERS', else
    their own), that leaves out the `optional` ones, in that order, where it would not fit, then cuts text
    before figures and ids and money last; csv of the same columns with their raw values (the money
    columns' currency after them); their JSON, or one field of each, a line each."""
    items = list(items)
    if scripted(items):
        return
    if settings().output == "csv":
        named = list(columns)
        if any(_is_money(name) for name in named) and "currency" not in named:
            named.insert(max(k for k, name in enumerate(named) if _is_money(name)) + 1, "currency")
        click.echo(
            csv_text(named, [[_field(item, name, None) for name in named] for item in items]), nl=False
        )
        return
    names = {**COLUMN_HEADERS, **(headers or {})}
    table = [
        [_in_column(name, _field(item, name, None), item.get("currency")) for name in columns]
        for item in items
    ]
    click.echo(
        table_text(
            [names.get(name, name) for name in columns],
            table,
            text=[k for k, name in enumerate(columns) if name.rsplit(".", 1)[-1] in TEXT_COLUMNS],
            keep=[k for k, name in enumerate(columns) if _is_identifier(name) or _is_money(name)],
            optional=[columns.index(name) for name in optional],
        )
    )


# Shorter headers for long field names, so that lists fit (csv heads its columns with the names themselves).
COLUMN_HEADERS = {
    "accelerator_hours": "accel-hours",
    "accelerators_per_node": "per\nnode",
    "scale_up_bandwidth_bytes_per_second": "scale-up\neach way",
    "scale_out_bandwidth_bytes_per_second": "scale-out\neach way",
    "memory_bytes": "memory",
    "peak_flops.bf16": "bf16 peak",
    "price_per_hour": "price",
    "price_per_kwh": "price/kWh",
    "created_at": "created",
    "period_start": "start",
    "period_end": "end",
    "effective_at": "effective",
    "expected_end_at": "expected end",
    "last_used_at": "last used",
    "revoked_at": "revoked",
    "estimate_at_completion": "at completion",
    "share_trained": "trained",
    "subject.type": "subject",
    "subject.id": "subject id",
    "predicted_tokens_per_second": "predicted\ntokens/s",
    "measured_tokens_per_second": "measured\ntokens/s",
    "tokens_per_second": "tokens/s",
}
# Columns of free text, cut (with an ellipsis) before any other where a table would not fit.
TEXT_COLUMNS = {
    "name",
    "source",
    "note",
    "description",
    "url",
    "reason",
    "band",
    "reporter",
    "actor",
    "vendor",
}


def _in_column(name: str, value: Any, currency: str | None) -> str:
    """A value as a list's column shows it: as human() does, but without the unit its header names (days)."""
    text = human(name, value, currency)
    unit = UNITS.get(name.rsplit(".", 1)[-1], "")
    return text.removesuffix(unit) if unit and isinstance(value, int | float) else text


def _is_identifier(name: str) -> bool:
    """Whether a column names things (ids, slugs), which are cut only when nothing else is left to cut."""
    return name in IDENTIFIERS or name.endswith((".id", "_id"))


IDENTIFIERS = {"id", "slug", "offer", "key_id", "budget", "organization", "hardware", "plan"}


def _is_money(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in MONEY


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A header row and rows of raw values: numbers as Python writes them (round-trip exact, no separators),
    money and times as the API gives them, yes/no as true/false, nothing as an empty cell, objects and lists
    as JSON."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)  # RFC 4180, CRLF line ends: as the server's own exports
    writer.writerow(header)
    writer.writerows([[_raw(value) for value in row] for row in rows])
    return buffer.getvalue()


def _raw(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return repr(value) if isinstance(value, float) else str(value)


# --- Tables that fit --------------------------------------------------------------------------------------

TABLE_WIDTH = 100  # the widest a table prints for a file, a pipe or a document, unless COLUMNS says otherwise
MIN_TABLE_WIDTH = 40
GAP = 2  # spaces between columns
COMFORTABLE = 24  # a text column is cut to this before an optional column is left out
NARROW = 10  # ... and to this, the optional columns gone, before anything else is cut
RULE = None  # a row of a table that is a line under the rows above it (the breakdown's, above its total)


def table_width() -> int:
    """The width tables fit: a terminal's own (or COLUMNS', as shutil reads it); for a file or a pipe,
    TABLE_WIDTH, or COLUMNS when it is wider (COLUMNS=200 planner report costs ... > report.txt). A wider
    COLUMNS only: a pipe's reader is no terminal of that width, and test runners export COLUMNS=80."""
    try:
        terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):  # a stream without a descriptor, or closed
        terminal = False
    if terminal:
        return max(MIN_TABLE_WIDTH, shutil.get_terminal_size((TABLE_WIDTH, 24)).columns)
    columns = os.environ.get("COLUMNS", "")
    return max(TABLE_WIDTH, int(columns)) if columns.isdigit() else TABLE_WIDTH


def table_text(
    headers: Sequence[str],
    rows: Sequence[Sequence[str] | None],
    *,
    align: Sequence[str] = (),
    text: Collection[int] = (),
    keep: Collection[int] = (),
    optional: Sequence[int] = (),
) -> str:
    """Rows under headers (a header may have two lines), columns GAP apart, within table_width(): the optional
    columns left out, in their order, and cells cut with an ellipsis, text columns first and `keep` ones
    last, as far as needed."""
    cells = [max((len(row[k]) for row in rows if row is not RULE), default=0) for k in range(len(headers))]
    natural = [max(cells[k], *map(len, header.split("\n"))) for k, header in enumerate(headers)]
    shown, widths = fit_columns(natural, cells, table_width(), text=text, keep=keep, optional=optional)
    alignment = [*align, *["left"] * (len(headers) - len(align))]
    depth = max(headers[k].count("\n") for k in shown) + 1  # of the headers shown
    stacked = [[""] * (depth - 1 - header.count("\n")) + header.split("\n") for header in headers]
    rule = ["-" * width for width in widths]
    lines = [[header[line] for header in stacked] for line in range(depth)]
    lines += [rule, *(rule if row is RULE else row for row in rows)]
    clipped = [[_clipped(line[k], widths[k]) for k in shown] for line in lines]
    table = tabulate(clipped, tablefmt="plain", disable_numparse=True, colalign=[alignment[k] for k in shown])
    return "\n".join(line.rstrip() for line in table.split("\n"))


def _clipped(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def fit_columns(
    natural: Sequence[int],
    cells: Sequence[int],
    width: int,
    *,
    text: Collection[int],
    keep: Collection[int],
    optional: Sequence[int],
) -> tuple[list[int], list[int]]:
    """The columns shown and their widths (`natural`: a column's widest line, header included; `cells`: its
    widest cell): every column at its natural width if the table fits; else the optional columns left out
    until it would fit with its text columns cut to COMFORTABLE; then, as far as needed, the widest column
    narrowed, first of the text columns down to NARROW, then of the headers wider than their cells, then of
    the columns but `keep`'s down to 4, then of any."""
    shown = list(range(len(natural)))

    def total(widths: Sequence[int]) -> int:
        return sum(widths[k] for k in shown) + GAP * (len(shown) - 1)

    comfortable = [min(size, COMFORTABLE) if k in text else size for k, size in enumerate(natural)]
    for column in optional:
        if total(comfortable) <= width:
            break
        shown.remove(column)
    widths = list(natural)
    floors: list[tuple[Collection[int], Callable[[int], int]]] = [
        (text, lambda k: NARROW),
        (shown, lambda k: max(cells[k], 6)),
        ([k for k in shown if k not in keep], lambda k: 4),
        (shown, lambda k: 1),
    ]
    for columns, floor in floors:
        narrowable = [k for k in shown if k in columns]
        while total(widths) > width and (candidates := [k for k in narrowable if widths[k] > floor(k)]):
            widths[max(candidates, key=lambda k: widths[k])] -= 1
    return shown, widths


def key_value_table(rows: Sequence[tuple[str, str]]) -> str:
    """Names and values, a line each, within table_width(): a long value wraps under itself (at its ' · '
    separators where it has them), a long name is cut."""
    width = table_width()
    label_width = min(max((len(label) for label, _ in rows), default=0), width // 2)
    value_width = width - label_width - GAP
    lines = []
    for label, text in rows:
        parts = wrapped(text, value_width)
        lines.append(f"{_clipped(label, label_width):<{label_width}}  {parts[0]}".rstrip())
        lines += [" " * (label_width + GAP) + part for part in parts[1:]]
    return "\n".join(lines)


def wrapped(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width`, broken after a ' · ' separator where it can be, else between
    words; the lines joined by spaces are the text again."""
    if len(text) <= width:
        return [text]
    lines: list[str] = []
    line = ""
    pieces = text.split(" · ")
    for k, separated in enumerate(pieces):
        piece = separated + (" ·" if k < len(pieces) - 1 else "")
        if len(f"{line} {piece}") <= width if line else len(piece) <= width:
            line = f"{line} {piece}" if line else piece
            continue
        if line:
            lines.append(line)
        *full, line = textwrap.wrap(piece, width, break_on_hyphens=False) or [""]
        lines += full
    return [*lines, line]


class Identifier(click.ParamType):
    """An id the API makes, a UUID, checked before it is sent: a mistyped one is the command line's error
    (exit 2), said at once, not the server's 404 of a path it has no route for."""

    name = "id"

    def __init__(self, resource: str):
        self.resource = resource

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return str(uuid.UUID(str(value)))
        except ValueError:
            self.fail(f"{value!r} is not a {self.resource} id: ids are UUIDs, as lists show them", param, ctx)


_MISSING = object()


def _field(body: Json, path: str, default: Any = _MISSING) -> Any:
    """A field of the answer by name, dotted for a nested one (estimate.days)."""
    value: Any = body
    for name in path.split("."):
        if not isinstance(value, dict) or name not in value:
            if default is not _MISSING:
                return default
            raise click.ClickException(
                f"--get {path}: the answer has no such field; it has {', '.join(body)}"
            )
        value = value[name]
    return value


def _text(value: Any) -> str:
    """A value as --get prints it: as a csv cell does (_raw), but objects and lists as readable JSON."""
    return json.dumps(value) if isinstance(value, dict | list) else _raw(value)


def first(items: Iterator[Json], limit: int) -> list[Json]:
    return list(islice(items, limit))


# --- Figures as people read them ----------------------------------------------------------------------------

MONEY = {
    "cost",
    "amount",
    "committed",
    "remaining",
    "cumulative",
    "price_per_hour",
    "burn_rate_per_day",
    "spent",
    "overrun",
    "actual_cost",
    "planned_cost",
    "estimate_at_completion",
    "variance_at_completion",
    "variance_cost",
    "off_schedule_cost",
    "approval_above",
    "price_per_kwh",
}
MONEY_RATES = {"price_per_hour": "/h", "burn_rate_per_day": "/day", "price_per_kwh": "/kWh"}
COUNT_SCALES = ((1e12, "T"), (1e9, "B"), (1e6, "M"))


def human(name: str, value: Any, currency: str | None = None) -> str:
    """A field's value in the units its name gives (the API puts them there): 6.57e10 params as 65.7B,
    memory_bytes in GB, peak FLOP/s in TFLOP/s, money exactly with its currency."""
    field = name.rsplit(".", 1)[-1]
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return _string(field, value, currency)
    if isinstance(value, list):
        return ", ".join(_text(item) for item in value)
    if not isinstance(value, int | float):
        return str(value)
    shown = next((figure(value) for says, figure in FIGURES if says(name)), None)
    return shown or _plain(value) + UNITS.get(field, "")


def _count(value: float) -> str:
    scale, suffix = next(((s, x) for s, x in COUNT_SCALES if abs(value) >= s), (1, ""))
    return f"{value / scale:.3g}{suffix}" if suffix else _plain(value)


def _plain(value: float) -> str:
    """Four significant figures; from 1 000 on, whole numbers with thousands separators."""
    if isinstance(value, int):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


# How a figure is shown, by what its (dotted) name says of its unit: the first that applies.
FIGURES: tuple[tuple[Callable[[str], bool], Callable[[float], str]], ...] = (
    (lambda name: name.startswith("peak_flops."), lambda value: f"{value / 1e12:.4g} TFLOP/s"),
    (lambda name: name.endswith(("params", "tokens", "tokens_trained")), _count),
    (lambda name: name.endswith("share_trained"), lambda value: f"{value * 100:.3g}%"),
    (lambda name: name.endswith("flops"), lambda value: f"{value:.3g} FLOPs"),
    (
        lambda name: name.endswith("bytes_per_second"),
        lambda value: f"{value / 1e12:.3g} TB/s" if value >= 1e12 else f"{value / 1e9:.3g} GB/s",
    ),
    (lambda name: name.endswith("bytes"), lambda value: f"{value / 1e9:.3g} GB"),
    (lambda name: name.endswith("utilization"), lambda value: f"{value * 100:.3g}%"),
)
UNITS = {"days": " days", "pf_days": " PF-days", "tdp_watts": " W", "seconds": " s"}


def _string(field: str, value: str, currency: str | None) -> str:
    """Money exactly, with its currency and the rate its name says; a time as _when shows it; other text as
    it is."""
    if field in MONEY and currency:
        return f"{_money(value)} {currency}{MONEY_RATES.get(field, '')}"
    return _when(value) if ISO_TIME.match(value) else value


ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


def _when(text: str) -> str:
    """A time as tables show it: in UTC to the minute, 2026-11-01 06:30Z, and a midnight as its date alone
    (periods begin and end at them); the API's own text when it is not a time with an offset."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    if moment.tzinfo is None:
        return text
    moment = moment.astimezone(UTC)
    return f"{moment:%Y-%m-%d}" if moment.time() == dt_time(0) else f"{moment:%Y-%m-%d %H:%MZ}"


def _money(amount: str) -> str:
    try:
        return f"{Decimal(amount):,}"
    except InvalidOperation:
        return amount


def flat_rows(body: Json, prefix: str = "", currency: str | None = None) -> Rows:
    """Every field of an answer, nested ones by dotted name; lists of objects are left to --output json."""
    currency = body.get("currency", currency)
    rows: Rows = []
    for name, value in body.items():
        if isinstance(value, dict):
            rows += flat_rows(value, f"{prefix}{name}.", currency)
        elif not (isinstance(value, list) and any(isinstance(item, dict) for item in value)):
            rows.append(Row(prefix + name, human(prefix + name, value, currency), prefix + name, value))
    return rows


def named_rows(body: Json, names: Iterable[str], prefix: str = "") -> Rows:
    """The fields `names` of `body` that it gives (`prefix` their path in the answer); after its first money
    field, for csv, its currency, which the table writes beside each amount."""
    rows = []
    currency = body.get("currency")
    for name in names:
        if body.get(name) is None:
            continue
        rows.append(Row(name, human(name, body[name], currency), prefix + name, body[name]))
        if (
            name in MONEY
            and currency
            and "currency" not in names
            and not any(r.field == prefix + "currency" for r in rows)
        ):
            rows.append(Row("currency", currency, prefix + "currency", currency, in_table=False))
    return rows


def warning_rows(body: Json, prefix: str = "") -> Rows:
    return [
        Row("warning", f"{warning['code']}: {warning['message']}", f"{prefix}warnings", warning["code"])
        for warning in body.get("warnings") or []
    ]


def estimate_rows(estimate: Json, *, experts: bool = True, prefix: str = "") -> Rows:
    """A run's time, cost and pace: with the cluster model's performance, its MFU, layout, steps and
    goodput (and of a mixture of experts, unless `experts` is false, its active parameters and experts);
    with a given MFU, that. `prefix`: the estimate's path in the answer. A row that says several things
    gives csv the figure it leads with, or the object it tells of."""
    rows = named_rows(estimate, ("days", "accelerator_hours"), prefix)
    if estimate.get("accelerators") is not None:
        rows.append(
            Row(
                "accelerators", accelerators_text(estimate), f"{prefix}accelerators", estimate["accelerators"]
            )
        )
    rows += named_rows(estimate, ("cost",), prefix)
    if intervals := estimate.get("intervals"):
        label = f"{intervals['confidence']:.0%} interval"
        rows.append(
            Row(label, interval_text(intervals, estimate.get("currency")), f"{prefix}intervals", intervals)
        )
    performance = estimate.get("performance")
    at = f"{prefix}performance."
    if performance:
        layout = performance["layout"]
        batch = f"{layout['global_batch']:,} sequences ({_count(performance['tokens_per_step'])} tokens)"
        steps = f"{performance['steps']:,} of {_plain(performance['step_seconds'])} s, {batch} each"
        goodput = performance["goodput"]
        rows += experts_rows(performance, prefix=at) if experts else []
        rows += [
            Row("MFU", _percent(performance["mfu"]), f"{at}mfu", performance["mfu"]),
            Row("HFU", _percent(performance["hfu"]), f"{at}hfu", performance["hfu"]),
            Row("layout", layout_line(layout, experts=is_mixture(performance)), f"{at}layout", layout),
            Row("steps", steps, f"{at}steps", performance["steps"]),
            Row("goodput", goodput_text(goodput), f"{at}goodput.useful_fraction", goodput["useful_fraction"]),
        ]
        if framework := performance.get("framework"):  # servers before issue 48 name none
            rows.append(Row("framework", framework, f"{at}framework", framework))
        if efficiency := performance.get("hardware_efficiency"):
            text = efficiency_text(efficiency)
            rows.append(Row("hardware efficiency", text, f"{at}hardware_efficiency.gemm", efficiency["gemm"]))
    elif estimate.get("mfu") is not None:
        given = f"{_percent(estimate['mfu'])} (given: the cluster model is not used)"
        rows.append(Row("MFU", given, f"{prefix}mfu", estimate["mfu"]))
    if memory := estimate.get("memory"):
        rows.append(
            Row(
                "memory per accelerator",
                memory_text(memory),
                f"{prefix}memory.total_bytes",
                memory["total_bytes"],
            )
        )
    if (energy := estimate.get("energy")) and energy.get("energy_kwh") is not None:
        rows.append(Row("energy", energy_text(energy), f"{prefix}energy.energy_kwh", energy["energy_kwh"]))
    return rows


def energy_text(energy: Json) -> str:
    """The facility's energy and, with a grid, the emissions: "82,069 kWh (PUE 1.1), 35.5 t CO2e at
    gcp:us-central1's 432 g/kWh (2025)"; without one, what is missing."""
    site = energy.get("site") or {}
    text = f"{energy['energy_kwh']:,.0f} kWh (PUE {site.get('pue', '?')})"
    if energy.get("emissions_kg_co2e") is None:
        return text + ", no emissions: give a site region or its grid intensity"
    grid = f"{site.get('region') or 'the grid'}'s {site.get('grid_intensity_g_per_kwh', 0):.0f} g/kWh"
    year = f" ({site['grid_intensity_year']})" if site.get("grid_intensity_year") else ""
    return f"{text}, {energy['emissions_kg_co2e'] / 1000:,.1f} t CO2e at {grid}{year}"


def efficiency_text(efficiency: Json) -> str:
    """What the run took the hardware to achieve of its peaks, and how that is known: "GEMM 60.2%,
    attention 28.2% of peak (calibrated)"."""
    parts = [f"GEMM {_percent(efficiency['gemm'])}"]
    if efficiency.get("attention") is not None:
        parts.append(f"attention {_percent(efficiency['attention'])}")
    return f"{', '.join(parts)} of peak ({efficiency['provenance']})"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


# How the planner chose the accelerator count, by SizingSchema.chosen_by.
CHOSEN_BY = {
    "days": "the fewest that finish by the deadline",
    "cost": "the fewest accelerator-hours among runs within a year",
    "budget": "the count whose limits buy the most compute",
}


def accelerators_text(estimate: Json) -> str:
    count = f"{estimate['accelerators']:,}"
    sizing = (estimate.get("performance") or {}).get("sizing")
    if not sizing:
        return count
    why = CHOSEN_BY.get(sizing["chosen_by"], "")
    return (
        f"{count} (chosen by {sizing['chosen_by']}{': ' + why if why else ''}; "
        f"{sizing['counts_tried']} counts tried, at most {sizing['max_accelerators']:,})"
    )


def is_mixture(performance: Json) -> bool:
    """Whether the modelled shape is a mixture of experts (it has experts)."""
    return bool((performance.get("shape") or {}).get("experts"))


def experts_rows(performance: Json, prefix: str = "") -> Rows:
    """Of a mixture of experts: the parameters a token passes through, of all, and its experts (`prefix`: the
    performance's path in the answer)."""
    if not is_mixture(performance):
        return []
    shape = performance["shape"]
    experts = f"{shape['experts']:,}, {shape['experts_per_token']} per token"
    if shape.get("shared_experts"):
        experts += f" + {shape['shared_experts']} shared"
    if shape.get("moe_layers") is not None:
        experts += f", on {shape['moe_layers']} of {shape['layers']} layers"
    active = f"{_count(shape['active_params'])} of {_count(shape['params'])}"
    return [
        Row("active params", active, f"{prefix}shape.active_params", shape["active_params"]),
        Row("experts", experts, f"{prefix}shape.experts", shape["experts"]),
    ]


RECOMPUTATION_SHOWN = {"none": "no recomputation", "full": "full recomputation"}


def layout_line(layout: Json, *, experts: bool = False) -> str:
    """A layout in one line, as papers write it: TP 8 · PP 16 · DP 128 · micro-batch 1 · ZeRO 1 · ...;
    of a mixture of experts (`experts`), with its expert-parallel degree (EP) and whether its all-to-all
    runs under compute."""
    parts = [f"TP {layout['tensor_parallel']}", f"PP {layout['pipeline_parallel']}"]
    parts.append(f"DP {layout['data_parallel']}")
    if layout.get("context_parallel", 1) != 1:
        parts.append(f"CP {layout['context_parallel']}")
    expert_parallel = layout.get("expert_parallel", 1)
    if experts or expert_parallel != 1:
        parts.append(f"EP {expert_parallel}")
        if expert_parallel > 1:
            overlapped = layout.get("expert_overlap")
            parts.append("all-to-all overlapped" if overlapped else "all-to-all not overlapped")
    parts.append(f"micro-batch {layout['micro_batch']}")
    if layout.get("interleave", 1) != 1:
        parts.append(f"interleave {layout['interleave']}")
    parts.append(f"ZeRO {layout['zero_stage']}")
    recomputation = layout["recomputation"]
    parts.append(RECOMPUTATION_SHOWN.get(recomputation, f"{recomputation} recomputation"))
    if layout["tensor_parallel"] > 1 and not layout.get("sequence_parallel", True):
        parts.append("no sequence parallelism")
    if not layout.get("flash_attention", True):
        parts.append("no FlashAttention")
    return " · ".join(parts)


def interval_text(intervals: Json, currency: str | None) -> str:
    """Where runs like this one fell: days, accelerator-hours and cost, low to high, and why that wide."""
    parts = [
        f"{_plain(intervals['days'][0])}-{_plain(intervals['days'][1])} days",
        f"{_count(intervals['accelerator_hours'][0])}-{_count(intervals['accelerator_hours'][1])} "
        "accelerator-hours",
    ]
    if intervals.get("cost"):
        low, high = intervals["cost"]
        parts.append(f"{_money(low)}-{_money(high)} {currency or ''}".rstrip())
    groups = ", ".join(intervals.get("categories") or ["whole runs"])
    return " · ".join(parts) + f" (runs like this: {groups})"


def goodput_text(goodput: Json) -> str:
    parts = [f"{_percent(goodput['useful_fraction'])} useful"]
    if goodput.get("checkpoint_interval_seconds") is not None:
        parts.append(f"checkpoint every {_duration(goodput['checkpoint_interval_seconds'])}")
    interruptions = goodput["interruptions"]
    expected = f"{interruptions:.2g}" if interruptions < 10 else f"{interruptions:,.0f}"
    parts.append(f"{expected} interruptions expected")
    if goodput.get("run_overhead"):
        whose = OVERHEAD_SOURCES.get(goodput.get("run_overhead_source") or "default", "")
        parts.append(f"{_percent(goodput['run_overhead'])} lost besides ({whose})")
    return " · ".join(parts)


# Whose run overhead an answer took (goodput.run_overhead_source), as the CLI says it.
OVERHEAD_SOURCES = {
    "default": "as published whole runs lose",
    "hardware": "the hardware profile's",
    "calibration": "as your runs lost: your calibration",
    "request": "as asked",
}


def memory_text(memory: Json) -> str:
    used = human("total_bytes", memory["total_bytes"])
    capacity = memory.get("capacity_bytes")
    of = f" of {human('capacity_bytes', capacity)}" if capacity else ""
    return f"{used}{of} ({'fits' if memory.get('fits') else 'does NOT fit'})"


# The parts of a step (BreakdownSchema), as the table names them.
BREAKDOWN = {
    "compute": "compute",
    "memory_bound": "memory-bound work",
    "tensor_parallel": "tensor parallel (exposed)",
    "context_parallel": "context parallel",
    "pipeline_bubble": "pipeline bubble",
    "pipeline_transfers": "pipeline transfers",
    "expert_parallel": "expert all-to-all (exposed)",
    "data_parallel": "data parallel (exposed)",
    "optimizer": "optimizer",
}


def _seconds_shown(step_seconds: float) -> Callable[[float], str]:
    """Seconds with the decimals that give the step four significant figures, for a column of them."""
    decimals = max(0, 3 - math.floor(math.log10(step_seconds))) if step_seconds > 0 else 3
    return lambda seconds: f"{seconds:.{decimals}f}"


def breakdown_table(performance: Json) -> str:
    """Where a step's time goes: each part in seconds and as a share of the step."""
    step = performance["step_seconds"]
    seconds = _seconds_shown(step)
    rows: list = [
        [BREAKDOWN.get(part, part.replace("_", " ")), seconds(spent), _percent(spent / step if step else 0)]
        for part, spent in performance["breakdown"].items()
    ]
    rows += [RULE, ["step", seconds(step), _percent(1)]]
    return table_text(["step time", "seconds", "% of step"], rows, align=("left", "right", "right"))


def breakdown_rows(performance: Json) -> Rows:
    """The breakdown as csv gives it beside the estimate's rows: each part's seconds, then the step's."""
    rows = [
        Row(part, "", f"performance.breakdown.{part}", spent)
        for part, spent in performance["breakdown"].items()
    ]
    return [*rows, Row("step", "", "performance.step_seconds", performance["step_seconds"])]


LAYOUT_COLUMNS = (
    "rank",
    "tensor_parallel",
    "pipeline_parallel",
    "data_parallel",
    "context_parallel",
    "expert_parallel",
    "expert_overlap",
    "micro_batch",
    "interleave",
    "recomputation",
    "zero_stage",
    "global_batch",
    "step_seconds",
    "mfu",
    "memory_bytes",
)
LAYOUT_HEADERS = {
    "rank": "",
    "tensor_parallel": "TP",
    "pipeline_parallel": "PP",
    "data_parallel": "DP",
    "context_parallel": "CP",
    "expert_parallel": "EP",
    "expert_overlap": "overlap",
    "micro_batch": "micro",
    "interleave": "inter-\nleave",
    "recomputation": "recompute",
    "zero_stage": "ZeRO",
    "global_batch": "batch",
    "step_seconds": "step s",
    "mfu": "MFU %",
    "memory_bytes": "GB",
}


def ranked_layouts(performance: Json) -> list[Json]:
    """The chosen layout (rank 1), then the alternatives the search ranked next: a layout's fields with its
    step, MFU and memory each."""
    chosen = {name: performance[name] for name in ("layout", "step_seconds", "mfu", "memory_bytes")}
    return [
        {
            "rank": rank,
            **option["layout"],
            **{name: option[name] for name in ("step_seconds", "mfu", "memory_bytes")},
        }
        for rank, option in enumerate([chosen, *performance["alternatives"]], start=1)
    ]


def layout_columns(performance: Json, layouts: Sequence[Json]) -> list[str]:
    """The ranked layouts' columns: context and expert parallelism only where a layout has them (or, for the
    experts, where the model is a mixture of experts)."""
    with_context = any(layout.get("context_parallel", 1) != 1 for layout in layouts)
    with_experts = is_mixture(performance) or any(layout.get("expert_parallel", 1) != 1 for layout in layouts)
    left_out = {*(() if with_context else ("context_parallel",))}
    left_out |= set() if with_experts else {"expert_parallel", "expert_overlap"}
    return [name for name in LAYOUT_COLUMNS if name not in left_out]


def layouts_table(performance: Json) -> str:
    """The chosen layout, then the alternatives the search ranked next: a row each."""
    layouts = ranked_layouts(performance)
    columns = layout_columns(performance, layouts)
    seconds = _seconds_shown(performance["step_seconds"])
    shown = {
        "rank": lambda rank: "chosen" if rank == 1 else "",
        "expert_overlap": lambda overlap: "yes" if overlap else "no",
        "global_batch": lambda batch: f"{batch:,}",
        "step_seconds": seconds,
        "mfu": lambda mfu: f"{mfu * 100:.1f}",
        "memory_bytes": lambda memory: f"{memory / 1e9:.1f}",
    }
    rows = [[shown.get(name, str)(layout.get(name, 1)) for name in columns] for layout in layouts]
    align = ["left" if name in ("rank", "expert_overlap", "recomputation") else "right" for name in columns]
    return table_text([LAYOUT_HEADERS[name] for name in columns], rows, align=align)


def layout_rows(estimate: Json) -> Rows:
    performance = estimate["performance"]
    layout = performance["layout"]
    step = f"{_plain(performance['step_seconds'])} s at {_percent(performance['mfu'])} MFU"
    searched = (
        f"{performance['layouts_evaluated']:,} evaluated, {performance['layouts_fitting']:,} fit in memory"
    )
    at = "performance."
    rows = [
        Row("layout", layout_line(layout, experts=is_mixture(performance)), f"{at}layout", layout),
        *experts_rows(performance, prefix=at),
        Row(
            "global batch",
            f"{layout['global_batch']:,} sequences",
            f"{at}layout.global_batch",
            layout["global_batch"],
        ),
        Row("step", step, f"{at}step_seconds", performance["step_seconds"]),
        Row("accelerators", accelerators_text(estimate), "accelerators", estimate["accelerators"]),
    ]
    if memory := estimate.get("memory"):
        rows.append(
            Row("memory per accelerator", memory_text(memory), "memory.total_bytes", memory["total_bytes"])
        )
    layouts = Row("layouts", searched, f"{at}layouts_evaluated", performance["layouts_evaluated"])
    return [*rows, layouts, *warning_rows(estimate)]


def allocated_experts_rows(allocation: Json, prefix: str = "") -> Rows:
    """Of a mixture of experts an allocation (or a plan's result) names: its active parameters and experts."""
    rows = []
    if (active := allocation.get("active_params")) is not None:
        text = f"{_count(active)} of {_count(allocation['params'])}"
        rows.append(Row("active params", text, f"{prefix}active_params", active))
    if experts := allocation.get("experts"):
        text = f"{experts:,}, {allocation['experts_per_token']} per token"
        rows.append(Row("experts", text, f"{prefix}experts", experts))
    return rows


def allocation_rows(body: Json) -> Rows:
    """An allocation: N and D, and of a mixture of experts a law sized, its active parameters and experts
    (which the estimate's modelled shape then does not repeat)."""
    rows = named_rows(body, ("method", "params")) + allocated_experts_rows(body)
    rows += named_rows(body, ("tokens", "tokens_per_param", "flops", "pf_days", "predicted_loss"))
    if law := body.get("law"):
        rows.append(Row("law", law["slug"], "law.slug", law["slug"]))
    if body.get("estimate"):
        rows += estimate_rows(body["estimate"], experts=body.get("active_params") is None, prefix="estimate.")
    return rows + warning_rows(body)


PLAN_ROWS = (
    "id",
    "name",
    "status",
    "organization",
    "budget_id",
    "parent_id",
    "method",
    "params",
    "tokens",
    "flops",
    "predicted_loss",
    "hardware",
    "accelerators",
    "days",
    "accelerator_hours",
    "cost",
    "start_at",
    "end_at",
    "started_at",
    "finished_at",
    "actual_accelerator_hours",
    "actual_cost",
    "tokens_trained",
    "estimate_at_completion",
)


def plan_rows(plan: Json) -> Rows:
    """A plan's fields, and of a mixture of experts its active parameters and experts: as a law allocated
    them, else as the cluster model shaped the model given."""
    result = plan.get("result") or {}
    performance = (result.get("estimate") or {}).get("performance") or {}
    experts = allocated_experts_rows(result, "result.") or experts_rows(
        performance, "result.estimate.performance."
    )
    return named_rows(plan, PLAN_ROWS) + approval_rows(plan) + experts + warning_rows(result, "result.")


def approval_rows(plan: Json) -> Rows:
    """Who asked for the plan's approval, and what was decided (nothing for a plan that never asked)."""
    approval = plan.get("approval")
    if not approval:
        return []
    asked = f"asked {_when(approval['requested_at'])} by {approval['requested_by']}"
    if approval["decision"] is None:
        return [Row("approval", f"{asked}; waiting for a finance or admin key", "approval.decision", None)]
    decided = f"{approval['decision']} {_when(approval['decided_at'])} by {approval['decided_by']}"
    note = f": {approval['note']}" if approval.get("note") else ""
    return [Row("approval", f"{asked}; {decided}{note}", "approval.decision", approval["decision"])]


# --- The command tree ---------------------------------------------------------------------------------------


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--url",
    envvar=ENVIRONMENT["url"],
    help="The server, e.g. https://planner.example.com; default $PLANNER_URL, the profile's url, else "
    f"{DEFAULT_URL}.",
)
@click.option(
    "--api-key",
    envvar=ENVIRONMENT["api_key"],
    help="The API key; default $PLANNER_API_KEY, else the profile's.",
)
@click.option(
    "-o",
    "--output",
    envvar=ENVIRONMENT["output"],
    type=click.Choice(OUTPUTS),
    help="How answers print: table (default), json (the API's) or csv; default $PLANNER_OUTPUT, else the "
    "profile's output.",
)
@click.option("--json", "as_json", is_flag=True, help="The same as --output json (kept for scripts).")
@click.option(
    "--profile",
    envvar=PROFILE_ENVIRONMENT,
    metavar="NAME",
    shell_complete=_profile_names,
    help="The config file's profile to use; default $PLANNER_PROFILE, else the file's own choice "
    "(planner config use), else default.",
)
@click.version_option(__version__, "--version", prog_name="planner", message="%(prog)s %(version)s")
@click.pass_context
def planner(ctx: click.Context, **options: Any) -> None:
    """The Compute Planner API from a shell: plans, budgets, hardware, offers, laws, reports, webhooks and
    keys.

    Answers print as tables in the units people read (65.7B parameters, 80 GB, 23.68 days, money exactly
    with its currency), as wide as the terminal, 100 columns in a file or a pipe (wider if COLUMNS says);
    --output json prints the API's JSON, --output csv the table's rows with raw values, --get FIELD one
    field. The options below go before a command's name; --output, --json and --get go after it too.

    Each setting comes from the first of these that gives it:

    \b
    1. an option: --url, --api-key, --output (or --json)
    2. the environment: PLANNER_URL, PLANNER_API_KEY, PLANNER_OUTPUT
    3. the profile chosen by --profile, else by PLANNER_PROFILE, else by the
       config file (planner config use)
    4. the config file's default profile, [profiles.default]
    5. built in: http://127.0.0.1:8000, no key, table

    The config file is $XDG_CONFIG_HOME/planner/config.toml, by default ~/.config/planner/config.toml, on
    every system (planner config --help).

    Exit status, by the class of what went wrong:

    \b
    - 0: done
    - 1: anything else: the server unreachable, a file that cannot be read
    - 2: a command line or config file that is not valid (an unknown profile)
    - 3: not found (404, 410)
    - 4: not allowed (401, 403)
    - 5: a conflict with the resource's state (409, 412, 428)
    - 6: a request that is not valid (400, 413, 415, 422)
    - 7: the server cannot do it now (429, 5xx)

    Shell completion: planner completion --help.
    """
    given = {}
    for name in ("url", "api_key"):
        if value := options[name]:
            from_environment = ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT
            given[name] = (value, ENVIRONMENT[name] if from_environment else f"--{name.replace('_', '-')}")
    if chosen := output_given(ctx, options["output"], options["as_json"]):
        given["output"] = chosen
    ctx.obj = Settings(given, profile=options["profile"] or None)


def nested_request(
    options: dict[str, Any], field_sets: Sequence, body: Path | None, nested: Mapping[str, Sequence]
) -> Json:
    """The request: --body's fields, the options of its own, and the options of each object `nested` names
    (its fields) in that object, beside what --body gives of it."""
    request = request_body(options, *field_sets, body=body)
    for name, fields in nested.items():
        if given := request_body(options, fields):
            from_body = request.get(name)
            request[name] = {**(from_body if isinstance(from_body, dict) else {}), **given}
    return request


# Allocations and plans take the layout options too, sent in the request's `layout` object.
IN_LAYOUT = {"layout": LAYOUT_FIELDS}


@planner.command()
@fields_options(BUDGET_FIELDS, RULE_FIELDS, CLUSTER_FIELDS, LAYOUT_FIELDS)
@body_option
def allocate(body: Path | None, **options: Any) -> None:
    """Model size and tokens for a compute budget: give one budget (FLOPs, PF-days, money, accelerator-hours,
    days or a target loss) and optionally a law and a cluster (its layout options fix those fields of the
    layout the cluster model searches)."""
    request = nested_request(options, (BUDGET_FIELDS, RULE_FIELDS, CLUSTER_FIELDS), body, IN_LAYOUT)
    show(settings().client.allocate(**request), allocation_rows)


ESTIMATE_LAW = (("law", str, "Scaling law slug: the answer then predicts the model's loss."),)
ESTIMATE_REQUEST = (ESTIMATE_MODEL_FIELDS, ESTIMATE_CLUSTER_FIELDS, ESTIMATE_LAW)
# planner layout: what the cluster model searches, so not --mfu, which overrides the model.
LAYOUT_REQUEST = (
    ESTIMATE_MODEL_FIELDS,
    tuple(f for f in ESTIMATE_CLUSTER_FIELDS if f[0] != "mfu"),
    ESTIMATE_LAW,
)
CHECKPOINT_GB_PER_SECOND = {"checkpoint_write_gb_per_second": "checkpoint_write_bytes_per_second"}


def modelled_request(options: dict[str, Any], field_sets: Sequence, body: Path | None) -> Json:
    """An estimate's request: --body's fields, the options of its own, and the shape, layout and reliability
    options in their objects, beside what --body gives of them."""
    request = nested_request(options, field_sets, body, NESTED_FIELDS)
    if "reliability" in request and isinstance(request["reliability"], dict):
        request["reliability"] = bytes_per_second(request["reliability"], CHECKPOINT_GB_PER_SECOND)
    return request


def modelled_options(*field_sets: Sequence[tuple[str, Any, str]]) -> Callable:
    return fields_options(*field_sets, SHAPE_FIELDS, LAYOUT_FIELDS, RELIABILITY_FIELDS)


@planner.command()
@modelled_options(*ESTIMATE_REQUEST)
@body_option
def estimate(body: Path | None, **options: Any) -> None:
    """Time, cost and memory of training a given model (--params, --tokens) on a cluster, with the layout,
    step and goodput the cluster model predicts. Give the model's shape (--layers, --d-model, --heads,
    --sequence-length, ...) for a closer prediction, a mixture of experts with --experts and
    --experts-per-token (or, without a shape, --active-params); layout options left out are searched; leave
    out --accelerators for the planner to choose them (by --days, or the cheapest)."""
    answer = settings().client.estimate(**modelled_request(options, ESTIMATE_REQUEST, body))
    performance = answer.get("performance")
    if settings().output == "csv" and performance:  # the breakdown's rows too, in the one csv
        show(
            answer,
            lambda answer: [*estimate_rows(answer), *breakdown_rows(performance), *warning_rows(answer)],
        )
        return
    show(answer, lambda answer: [*estimate_rows(answer), *warning_rows(answer)])
    if performance and settings().table:
        click.echo()
        click.echo(breakdown_table(performance))


@planner.command()
@modelled_options(*LAYOUT_REQUEST)
@body_option
def layout(body: Path | None, **options: Any) -> None:
    """The parallel layout the cluster model chooses for training a given model (--params, --tokens) on a
    cluster, and the alternatives it ranked next: the same options as estimate (but --mfu); layout options
    given are kept, the others searched."""
    answer = settings().client.estimate(**modelled_request(options, LAYOUT_REQUEST, body))
    if scripted(answer):
        return
    if not (performance := answer.get("performance")):
        raise click.ClickException(
            "the answer has no layout: an mfu in the request overrides the cluster model"
        )
    if settings().output == "csv":  # the ranked layouts
        layouts = ranked_layouts(performance)
        show_list(layouts, layout_columns(performance, layouts))
        return
    show(answer, layout_rows)
    click.echo()
    click.echo(layouts_table(performance))


# --- Organisations ---


@planner.group()
def organization() -> None:
    """Organisations (tenants): create, list, show."""


@organization.command("create")
@click.argument("slug")
@click.option("--name", required=True, help="Its display name, e.g. 'Acme Research'.")
def organization_create(slug: str, name: str) -> None:
    """Create organisation SLUG (admins)."""
    show(settings().client.create_organization(slug, name))


@organization.command("list")
@limit_option
def organization_list(limit: int) -> None:
    """Organisations, newest first."""
    show_list(
        first(settings().client.organizations(limit=min(limit, 100)), limit), ("slug", "name", "created_at")
    )


@organization.command("show")
@click.argument("slug")
def organization_show(slug: str) -> None:
    """Organisation SLUG."""
    show(settings().client.get_organization(slug))


# --- Hardware ---


@planner.group()
def hardware() -> None:
    """Hardware profiles and their prices: create, list, show, update, prices."""


def peak_flops(pairs: Sequence[str]) -> dict[str, float]:
    peaks = {}
    for pair in pairs:
        precision, sep, figure = pair.partition("=")
        try:
            peaks[precision] = float(figure)
        except ValueError:
            sep = ""
        if not sep:
            raise click.BadParameter(
                f"{pair!r}: takes PRECISION=FLOPS, e.g. bf16=989.4e12", param_hint="--peak-flops"
            )
    return peaks


PEAK_FLOPS_HELP = "Dense peak FLOP/s at a precision, PRECISION=FLOPS such as bf16=989.4e12; repeatable."


# Links are given in GB/s as vendors quote them (a 400 Gb/s NIC is 50 GB/s), and sent as the API's bytes/s.
GB_PER_SECOND_OPTIONS = {
    "scale_up_gb_per_second": "scale_up_bandwidth_bytes_per_second",
    "scale_out_gb_per_second": "scale_out_bandwidth_bytes_per_second",
}


def bytes_per_second(fields: Json, options: Mapping[str, str]) -> Json:
    """`fields` with each option given in GB/s (an option: its field) as its field in bytes/s."""
    fields = dict(fields)
    for option, field in options.items():
        if option in fields:
            gigabytes = fields.pop(option)
            if not math.isfinite(gigabytes):
                raise click.BadParameter(
                    "must be a finite number", param_hint=f"--{option.replace('_', '-')}"
                )
            fields[field] = round(gigabytes * 1e9)
    return fields


def hardware_request(options: dict[str, Any], peaks: Sequence[str], body: Path | None) -> Json:
    request = request_body(options, HARDWARE_FIELDS, body=body)
    if peaks:
        request["peak_flops"] = {**request.get("peak_flops", {}), **peak_flops(peaks)}
    return bytes_per_second(request, GB_PER_SECOND_OPTIONS)


@hardware.command("create")
@click.option("--slug", help="Its slug, e.g. our-h100: how plans and budgets name it.")
@click.option("--peak-flops", "peaks", multiple=True, metavar="PRECISION=FLOPS", help=PEAK_FLOPS_HELP)
@fields_options(HARDWARE_FIELDS)
@body_option
def hardware_create(slug: str | None, peaks: Sequence[str], body: Path | None, **options: Any) -> None:
    """A profile of your own: your figures, or a negotiated price (admins)."""
    request = hardware_request(options, peaks, body)
    if slug:
        request["slug"] = slug
    show(settings().client.create_hardware(**request))


@hardware.command("update")
@click.argument("slug")
@click.option("--peak-flops", "peaks", multiple=True, metavar="PRECISION=FLOPS", help=PEAK_FLOPS_HELP)
@fields_options(HARDWARE_FIELDS)
@body_option
def hardware_update(slug: str, peaks: Sequence[str], body: Path | None, **options: Any) -> None:
    """Change profile SLUG's fields given (admins); a new price joins its price history, in force from now."""
    show(settings().client.update_hardware(slug, hardware_request(options, peaks, body)))


HARDWARE_COLUMNS = (
    "slug",
    "name",
    "vendor",
    "peak_flops.bf16",
    "memory_bytes",
    "accelerators_per_node",
    "scale_up_bandwidth_bytes_per_second",
    "scale_out_bandwidth_bytes_per_second",
    "price_per_hour",
)


@hardware.command("list")
@click.option("--vendor", help="Only this vendor's, e.g. NVIDIA.")
@click.option("--precision", help="Only profiles with a peak at this precision, e.g. fp8.")
@limit_option
def hardware_list(vendor: str | None, precision: str | None, limit: int) -> None:
    """Hardware profiles: the built-in catalog, then yours."""
    found = settings().client.hardware(vendor=vendor, precision=precision, limit=min(limit, 100))
    # The name has the vendor; then the links go, the memory and price kept.
    optional = ("vendor", *HARDWARE_COLUMNS[7:4:-1])  # scale-out, scale-up, per node
    show_list(first(found, limit), HARDWARE_COLUMNS, optional=optional)


@hardware.command("show")
@click.argument("slug")
def hardware_show(slug: str) -> None:
    """Profile SLUG, with its current price."""
    show(settings().client.get_hardware(slug))


@hardware.command("prices")
@click.argument("slug")
@limit_option
def hardware_prices(slug: str, limit: int) -> None:
    """Profile SLUG's price history, newest first: what plans made at each time paid."""
    prices = first(settings().client.hardware_prices(slug, limit=min(limit, 100)), limit)
    show_list(prices, ("price_per_hour", "effective_at", "as_of", "source"))


# --- Offers and comparisons ---


@planner.group()
def offer() -> None:
    """Offers of hardware on a provider, region and pricing: list, show, prices, create, import."""


OFFER_FIELDS = (
    ("hardware", str, "The hardware profile's slug, e.g. h100-sxm."),
    ("pricing", str, "on_demand, reserved, spot or owned."),
    ("provider", str, "Who offers it, e.g. aws, lambda, ours."),
    ("region", str, "The provider's region, e.g. us-east-1."),
    ("instance_type", str, "The instance it comes in, e.g. p5.48xlarge."),
    ("accelerators_per_instance", int, "Accelerators an instance has; default 1."),
    ("term_days", int, "Reserved: the term paid whether used or not."),
    ("preemptions_per_instance_hour", float, "Spot: instances taken back per instance-hour, e.g. 1.07e-4."),
    ("preemptions_source", str, "Spot: where that rate comes from."),
    ("requeue_seconds", float, "Spot: how long a preempted job waits for capacity; default 1800."),
    ("pue", float, "The site's power usage effectiveness, e.g. 1.1."),
    ("grid_region", str, "The region its grid's carbon intensity is looked up by, e.g. FR."),
    ("source", str, "Where the offer comes from."),
    ("price_per_hour", str, "Per accelerator-hour (an owned offer's amortised capital), e.g. 6.88."),
    ("price_per_kwh", str, "Owned: the energy's price per kWh at the meter."),
    ("currency", str, "ISO 4217 code of the prices, e.g. USD."),
    ("price_as_of", str, "When the price was quoted, e.g. 2026-09."),
    ("price_source", str, "Where the price comes from."),
)
OFFER_COLUMNS = ("slug", "hardware", "provider", "region", "pricing", "price_per_hour")


@offer.command("list")
@click.option("--hardware", multiple=True, help="Only offers of this hardware slug; repeatable.")
@click.option("--provider", multiple=True, help="Only this provider's; repeatable.")
@click.option("--region", multiple=True, help="Only this region's; repeatable.")
@click.option("--pricing", multiple=True, help="Only this pricing (on_demand, reserved, spot, owned).")
@limit_option
def offer_list(limit: int, **filters: Sequence[str]) -> None:
    """Offers, newest first."""
    found = settings().client.offers(**filters, limit=min(limit, 100))
    show_list(first(found, limit), OFFER_COLUMNS)


@offer.command("show")
@click.argument("slug")
def offer_show(slug: str) -> None:
    """Offer SLUG, with its current price."""
    show(settings().client.get_offer(slug))


@offer.command("prices")
@click.argument("slug")
@limit_option
def offer_prices(slug: str, limit: int) -> None:
    """Offer SLUG's price history, newest first."""
    prices = first(settings().client.offer_prices(slug, limit=min(limit, 100)), limit)
    show_list(prices, ("price_per_hour", "price_per_kwh", "effective_at", "as_of", "source"))


@offer.command("create")
@click.option("--slug", required=True, help="Its slug, e.g. aws-p5-us-east-1.")
@fields_options(OFFER_FIELDS)
@body_option
def offer_create(slug: str, body: Path | None, **options: Any) -> None:
    """An offer with its price (admins)."""
    show(settings().client.create_offer(slug=slug, **request_body(options, OFFER_FIELDS, body=body)))


@offer.command("import")
@click.argument("catalog", type=click.File("r", encoding="utf-8-sig"))
@click.option("--provider", required=True, help="Whose catalog it is, e.g. aws.")
@click.option("--source", required=True, help="Where the file comes from, e.g. skypilot-catalog v8 @00148f2.")
@click.option("--currency", help="Of the file's prices; default USD.")
@click.option("--price-as-of", help="When the prices were quoted, e.g. 2026-11.")
@click.option(
    "--spot-preemptions-per-instance-hour", type=float, help="Spot rows' rate; without it they are refused."
)
@click.option("--spot-preemptions-source", help="Where that rate comes from.")
@click.option("--dry-run", is_flag=True, help="Report what would change; store nothing.")
def offer_import(catalog, provider: str, source: str, dry_run: bool, **options: Any) -> None:
    """Offers from CATALOG, a file in SkyPilot's vms.csv format (- for stdin), and what was refused."""
    fields = {name: value for name, value in options.items() if value is not None}
    report = settings().client.import_offers(
        catalog.read(), provider=provider, source=source, dry_run=dry_run, **fields
    )
    show(report, import_rows)


def import_rows(report: Json) -> Rows:
    """What an import did: counts of rows, created, updated, ...; the first refused rows, each with why."""
    counts = [
        Row("rows", str(report["rows"]), "rows", report["rows"]),
        Row("created", str(len(report["created"])), "created", report["created"]),
        Row("updated", str(len(report["updated"])), "updated", report["updated"]),
        Row("unchanged", str(report["unchanged"]), "unchanged", report["unchanged"]),
        Row(
            "without accelerator",
            str(report["without_accelerator"]),
            "without_accelerator",
            report["without_accelerator"],
        ),
        Row("refused", str(report["refused_count"]), "refused_count", report["refused_count"]),
    ]
    refused = [
        Row(
            f"line {row['line']}",
            f"{row['instance_type'] or ''} {row['accelerator'] or ''}: {row['reason']}",
            f"refused.{row['line']}",
            row["reason"],
        )
        for row in report["refused"][:20]
    ]
    dry_run = [Row("dry run", "nothing stored", "dry_run", True)] if report["dry_run"] else []
    return counts + refused + dry_run


COMPARE_FIELDS = (
    ("params", float, "A model already chosen: its parameters, e.g. 7e10 (with --tokens)."),
    ("tokens", float, "Its training tokens, e.g. 1.4e12."),
    ("days", float, "A deadline in days: the fewest accelerators that finish by it."),
    ("cost", str, "Money: the fastest within it for a model; a budget without one."),
    ("currency", str, "Of the comparison; offers priced otherwise are unable. Default USD."),
    ("flops", float, "A compute budget the law allocates on each offer."),
    ("law", str, "Scaling law slug, to allocate a budget and predict the loss."),
    ("tokens_per_param", float, "A fixed ratio instead of a law."),
    ("rank_by", click.Choice(("cost", "days", "compute")), "cost, days or compute (default by the run)."),
    ("max_accelerators", int, "Most accelerators on any offer; default 32768."),
)
COMPARISON_COLUMNS = (
    "rank",
    "offer",
    "pricing",
    "accelerators",
    "days",
    "cost",
    "energy.energy_kwh",
    "energy.emissions_kg_co2e",
    "frontier",
)
# A budget allocated on each offer ranks by the compute it buys: the model it buys, and its loss, say why.
BUDGET_COMPARISON_COLUMNS = (*COMPARISON_COLUMNS[:4], "params", "predicted_loss", *COMPARISON_COLUMNS[4:])
COMPARISON_HEADERS = {
    "energy.energy_kwh": "kWh",
    "energy.emissions_kg_co2e": "kg CO2e",
    "accelerators": "count",
    "predicted_loss": "loss",
}


@planner.command()
@click.option("--hardware", multiple=True, help="Only offers of this hardware slug; repeatable.")
@click.option("--provider", multiple=True, help="Only this provider's offers; repeatable.")
@click.option("--region", multiple=True, help="Only this region's offers; repeatable.")
@click.option("--pricing", multiple=True, help="Only this pricing (on_demand, reserved, spot, owned).")
@click.option("--offer", "offers", multiple=True, help="Only this offer; repeatable.")
@click.option("--save", metavar="SLUG", help="Keep each offer's run as a draft plan of this organisation.")
@fields_options(COMPARE_FIELDS)
@body_option
def compare(body: Path | None, save: str | None, **options: Any) -> None:
    """The cheapest way to train a run by a date, or the fastest for the money, on every offer: ranked, the
    frontier of days against cost marked, and why the others cannot take it."""
    request = request_body(options, COMPARE_FIELDS, body=body)
    for name in ("hardware", "provider", "region", "pricing", "offers"):
        if options[name]:
            request[name] = list(options[name])
    result = settings().client.compare(**request)
    table = settings().table
    if not scripted(result):
        rows = [
            {**row, "currency": result["currency"], "frontier": "*" if row["on_frontier"] else ""}
            for row in result["offers"]
        ]
        # Energy and emissions are the first to go where the table would not fit: --output json has them.
        optional = ("energy.emissions_kg_co2e", "energy.energy_kwh")
        columns = COMPARISON_COLUMNS
        if result["rank_by"] == "compute":  # then the pricing gives way to the model: an offer's slug says it
            columns, optional = BUDGET_COMPARISON_COLUMNS, (*optional, "pricing")
        show_list(rows, columns, COMPARISON_HEADERS, optional=optional)
        for row in result["unable"] if table else ():
            click.echo(f"{row['offer']}: cannot: {row['reason']}")
    for row in result["offers"] if save else ():
        plan = settings().client.create_plan(**row["plan"], organization=save)
        # Beside a table, a line of it; beside JSON or csv, where it does not spoil them.
        click.echo(f"{row['offer']}: saved as plan {plan['id']}", err=not table)


# --- Budgets ---


@planner.group()
def budget() -> None:
    """Budgets: create, list, show, update, utilization, ledger."""


ALLOWED_HARDWARE_HELP = "A hardware slug plans charged to it may use; repeatable (none given: any)."


def budget_options(function: Callable) -> Callable:
    function = body_option(function)
    function = click.option("--label", multiple=True, metavar="KEY=VALUE", help=LABEL_HELP)(function)
    allowed = click.option(
        "--allowed-hardware", "allowed", multiple=True, metavar="SLUG", help=ALLOWED_HARDWARE_HELP
    )
    return allowed(function)


def budget_request(
    options: dict[str, Any], allowed: Sequence[str], label: Sequence[str], body: Path | None
) -> Json:
    request = request_body(options, BUDGET_ORGANIZATION, BUDGET_ACCOUNT_FIELDS, body=body)
    if allowed:
        request["allowed_hardware"] = list(allowed)
    if label:
        request["labels"] = {**request.get("labels", {}), **labels(label)}
    return request


@budget.command("create")
@fields_options(BUDGET_ORGANIZATION, BUDGET_ACCOUNT_FIELDS)
@budget_options
def budget_create(allowed: Sequence[str], label: Sequence[str], body: Path | None, **options: Any) -> None:
    """A budget that plans are charged to when committed (finance)."""
    show(settings().client.create_budget(**budget_request(options, allowed, label, body)))


@budget.command("update")
@click.argument("budget_id", type=Identifier("budget"))
@fields_options(BUDGET_ACCOUNT_FIELDS)
@budget_options
def budget_update(
    budget_id: str, allowed: Sequence[str], label: Sequence[str], body: Path | None, **options: Any
) -> None:
    """Change budget BUDGET_ID's fields given (finance); its amount never drops below what is committed."""
    show(settings().client.update_budget(budget_id, budget_request(options, allowed, label, body)))


@budget.command("list")
@click.option("--organization", help="Only this organisation's budgets.")
@limit_option
def budget_list(organization: str | None, limit: int) -> None:
    """Budgets, newest first."""
    found = first(settings().client.budgets(organization=organization, limit=min(limit, 100)), limit)
    columns = ("id", "name", "organization", "amount", "committed", "remaining", "period_end")
    show_list(found, columns, optional=("organization", "period_end", "committed"))


@budget.command("show")
@click.argument("budget_id", type=Identifier("budget"))
def budget_show(budget_id: str) -> None:
    """Budget BUDGET_ID: its amount, what is committed and what remains."""
    show(settings().client.get_budget(budget_id))


@budget.command("forecast")
@click.argument("budget_id", type=Identifier("budget"))
def budget_forecast(budget_id: str) -> None:
    """Budget BUDGET_ID now and at completion: committed, spent, remaining, each running plan's forecast."""
    forecast = settings().client.budget_forecast(budget_id)
    if scripted(forecast):
        return
    currency = forecast["currency"]
    running = [
        {
            **run,
            "currency": currency,
            "band": band_text(run["intervals"], currency) if run.get("intervals") else None,
        }
        for run in forecast["running"]
    ]
    columns = (
        "plan_id",
        "name",
        "share_trained",
        "actual_cost",
        "estimate_at_completion",
        "band",
        "expected_end_at",
    )
    if settings().output == "csv":  # the running plans
        show_list(running, columns)
        return
    summary = {name: value for name, value in forecast.items() if name not in ("running", "intervals")}
    if forecast.get("intervals"):
        summary["estimate_at_completion_band"] = band_text(forecast["intervals"], currency)
    show(summary)
    click.echo()
    show_list(running, columns, optional=("band", "expected_end_at"))


def band_text(intervals: Json, currency: str) -> str:
    """An estimate at completion's band as the CLI prints it: "80%: 420.00-870.00 USD, P50 610.00"."""
    low, high = intervals["estimate_at_completion"]
    band = f"{round(100 * intervals['confidence'])}%: {_money(low)}-{_money(high)} {currency}"
    median = intervals.get("estimate_at_completion_p50")
    return band if median is None or low == high else f"{band}, P50 {_money(median)}"


@budget.command("utilization")
@click.argument("budget_id", type=Identifier("budget"))
def budget_utilization(budget_id: str) -> None:
    """Budget BUDGET_ID month by month: committed, running total, burn rate, when it runs out."""
    use = settings().client.budget_utilization(budget_id)
    if scripted(use):
        return
    months = [{**month, "currency": use["currency"]} for month in use["months"]]
    if settings().table:
        show({name: value for name, value in use.items() if name != "months"})
        click.echo()
    show_list(months, ("month", "plans", "committed", "cumulative"))  # csv: the months


@budget.command("ledger")
@click.argument("budget_id", type=Identifier("budget"))
@limit_option
def budget_ledger(budget_id: str, limit: int) -> None:
    """Budget BUDGET_ID's commits and releases, newest first: amount, plan, who, when."""
    entries = first(settings().client.budget_ledger(budget_id, limit=min(limit, 100)), limit)
    show_list(entries, ("created_at", "entry", "amount", "plan_id", "actor"))


# --- Keys ---


@planner.group()
def key() -> None:
    """API keys (admins): create, list, revoke."""


@key.command("create")
@click.option(
    "--role",
    required=True,
    type=click.Choice(["admin", "planner", "finance", "viewer"]),
    help="planner: plans; finance: budgets, commits and reports; viewer: reads; admin: everything.",
)
@click.option("--name", required=True, help="What the key is for, e.g. 'ci pipeline'.")
@click.option("--organization", help="The organisation it works in; required but for admin keys.")
@click.option("--expires-at", help="When it stops working, ISO 8601 with an offset (default: never).")
def key_create(role: str, name: str, organization: str | None, expires_at: str | None) -> None:
    """Issue a key: its full `key` is shown this once."""
    fields = {"role": role, "name": name, "organization": organization, "expires_at": expires_at}
    show(
        settings().client.create_key(**{field: value for field, value in fields.items() if value is not None})
    )


@key.command("list")
@limit_option
def key_list(limit: int) -> None:
    """Keys, newest first (never their secrets)."""
    keys = first(settings().client.keys(limit=min(limit, 100)), limit)
    columns = ("id", "key_id", "name", "role", "organization", "revoked_at", "last_used_at")
    show_list(keys, columns, optional=("last_used_at", "organization"))


@key.command("revoke")
@click.argument("key_uuid", type=Identifier("key"))
def key_revoke(key_uuid: str) -> None:
    """Revoke key KEY_UUID (its id in planner key list): it stops working at once."""
    settings().client.revoke_key(key_uuid)
    if settings().table:  # the API answers nothing: JSON and csv have nothing to print
        click.echo(f"revoked {key_uuid}")


# --- Plans ---


@planner.group()
def plan() -> None:
    """Plans: create, list, show, revise, commit, approve or reject, cancel, compare."""


PLAN_REQUEST = (PLAN_FIELDS, ESTIMATE_MODEL_FIELDS, BUDGET_FIELDS, RULE_FIELDS, CLUSTER_FIELDS)


def plan_request_options(function: Callable) -> Callable:
    options = [
        fields_options(*PLAN_REQUEST, LAYOUT_FIELDS),
        click.option("--spend-remaining", is_flag=True, default=None, help=SPEND_REMAINING),
        click.option("--label", multiple=True, metavar="KEY=VALUE", help=LABEL_HELP),
        click.option(
            "--body", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path), help=BODY_HELP
        ),
        click.option("--idempotency-key", help=IDEMPOTENCY_HELP),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def plan_request(options: dict[str, Any], *field_sets) -> Json:
    request = nested_request(options, field_sets, options.pop("body"), IN_LAYOUT)
    if options.pop("spend_remaining"):
        request["budget"] = "remaining"
    if options["label"]:
        request["labels"] = {**request.get("labels", {}), **labels(options["label"])}
    return request


@plan.command("create")
@fields_options(PLAN_ORGANIZATION)
@plan_request_options
def plan_create(**options: Any) -> None:
    """Evaluate a request and store it as a draft plan: an allocation (a budget and a cluster), or a model
    already chosen (--params and --tokens). Give --budget-id to be able to commit it."""
    request = plan_request(options, PLAN_ORGANIZATION, *PLAN_REQUEST)
    show(settings().client.create_plan(idempotency_key=options["idempotency_key"], **request), plan_rows)


@plan.command("revise")
@click.argument("plan_id", type=Identifier("plan"))
@plan_request_options
@click.option(
    "--unset",
    multiple=True,
    metavar="FIELD",
    help="Remove an input of the plan, e.g. law, or an object's, dotted: layout.zero_stage; repeatable.",
)
def plan_revise(plan_id: str, unset: Sequence[str], **options: Any) -> None:
    """A new draft from plan PLAN_ID's request with the options given changed (e.g. --budget-id,
    --accelerators), linked to it by parent_id."""
    changes = merged(removals(unset), plan_request(options, *PLAN_REQUEST))
    client = settings().client
    show(client.revise_plan(plan_id, changes, idempotency_key=options["idempotency_key"]), plan_rows)


def removals(fields: Sequence[str]) -> Json:
    """--unset's fields as the merge patch (RFC 7396) that removes them: null each, a dotted one inside its
    object (layout.zero_stage: {"layout": {"zero_stage": null}}), which keeps the object's other fields."""
    patch: Json = {}
    for path in fields:
        *objects, name = path.split(".")
        inside = patch
        for parent in objects:
            inside = inside.setdefault(parent, {})
        inside[name] = None
    return patch


def merged(base: Json, changes: Json) -> Json:
    """`base` with `changes` over it, object by object."""
    both = dict(base)
    for name, value in changes.items():
        inner = both.get(name)
        both[name] = merged(inner, value) if isinstance(inner, dict) and isinstance(value, dict) else value
    return both


PLAN_STATUSES = click.Choice(
    ["draft", "pending_approval", "rejected", "committed", "running", "completed", "failed", "cancelled"]
)


@plan.command("list")
@click.option("--organization", help="Only this organisation's plans.")
@click.option("--budget-id", help="Only plans charged to this budget.")
@click.option("--hardware", help="Only plans on this hardware profile.")
@click.option("--status", type=PLAN_STATUSES, help="Only plans in this status.")
@click.option("--label", metavar="KEY:VALUE", help="Only plans with this label, e.g. team:alpha.")
@click.option("--created-from", help="Created at or after this time (ISO 8601).")
@click.option("--created-to", help="Created before this time (ISO 8601).")
@limit_option
def plan_list(limit: int, **filters: Any) -> None:
    """Plans, newest first."""
    found = first(settings().client.plans(**filters, limit=min(limit, 100)), limit)
    columns = ("id", "name", "status", "organization", "params", "tokens", "days", "cost", "created_at")
    show_list(found, columns, optional=("created_at", "organization", "tokens", "params"))


@plan.command("show")
@click.argument("plan_id", type=Identifier("plan"))
def plan_show(plan_id: str) -> None:
    """Plan PLAN_ID (--output json adds its inputs, snapshot and result)."""
    show(settings().client.get_plan(plan_id), plan_rows)


@plan.command("commit")
@click.argument("plan_id", type=Identifier("plan"))
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_commit(plan_id: str, idempotency_key: str | None) -> None:
    """Reserve draft PLAN_ID's cost, FLOPs and accelerator-hours on its budget (409 if they do not fit); a
    plan costing more than its budget's approval_above waits for approval instead (pending_approval)."""
    show(settings().client.commit_plan(plan_id, idempotency_key=idempotency_key), plan_rows)


@plan.command("approve")
@click.argument("plan_id", type=Identifier("plan"))
@click.option("--note", help="Why (kept with the plan and sent with its event).")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_approve(plan_id: str, note: str | None, idempotency_key: str | None) -> None:
    """Approve plan PLAN_ID, pending approval (finance): it is committed, reserved on its budget now."""
    approved = settings().client.approve_plan(plan_id, note=note, idempotency_key=idempotency_key)
    show(approved, plan_rows)


@plan.command("reject")
@click.argument("plan_id", type=Identifier("plan"))
@click.option("--note", required=True, help="Why not (kept with the plan and sent with its event).")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_reject(plan_id: str, note: str, idempotency_key: str | None) -> None:
    """Reject plan PLAN_ID, pending approval (finance): nothing is reserved on its budget."""
    show(settings().client.reject_plan(plan_id, note=note, idempotency_key=idempotency_key), plan_rows)


@plan.command("cancel")
@click.argument("plan_id", type=Identifier("plan"))
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_cancel(plan_id: str, idempotency_key: str | None) -> None:
    """Cancel plan PLAN_ID; a committed plan gives its reservation back to its budget."""
    show(settings().client.cancel_plan(plan_id, idempotency_key=idempotency_key), plan_rows)


@plan.command("start")
@click.argument("plan_id", type=Identifier("plan"))
@click.option("--started-at", help="When the run began (ISO 8601); now by default.")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_start(plan_id: str, started_at: str | None, idempotency_key: str | None) -> None:
    """Committed plan PLAN_ID's run began (its first usage record starts it too)."""
    started = settings().client.start_plan(plan_id, started_at=started_at, idempotency_key=idempotency_key)
    show(started, plan_rows)


@plan.command("complete")
@click.argument("plan_id", type=Identifier("plan"))
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_complete(plan_id: str, idempotency_key: str | None) -> None:
    """Running plan PLAN_ID's run completed: what it did not spend goes back to its budget."""
    show(settings().client.complete_plan(plan_id, idempotency_key=idempotency_key), plan_rows)


@plan.command("fail")
@click.argument("plan_id", type=Identifier("plan"))
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_fail(plan_id: str, idempotency_key: str | None) -> None:
    """Running plan PLAN_ID's run failed: what it did not spend goes back to its budget."""
    show(settings().client.fail_plan(plan_id, idempotency_key=idempotency_key), plan_rows)


@planner.group()
def usage() -> None:
    """What running plans used: report, list and reverse usage records."""


USAGE_COLUMNS = (
    "id",
    "kind",
    "reporter",
    "period_start",
    "period_end",
    "accelerator_hours",
    "tokens",
    "cost",
)


@usage.command("report")
@click.argument("plan_id", type=Identifier("plan"))
@click.option(
    "--reporter", required=True, help="Who reports (an orchestrator, a job); its periods never overlap."
)
@click.option("--from", "period_start", required=True, help="Start of the period (ISO 8601, inclusive).")
@click.option("--to", "period_end", required=True, help="End of the period (ISO 8601, exclusive).")
@click.option("--accelerator-hours", type=float, required=True, help="Accelerator-hours used in the period.")
@click.option("--tokens", type=float, help="Tokens trained by the end of the period, in all.")
@click.option("--tokens-per-second", type=float, help="Measured throughput of the whole cluster.")
@click.option("--cost", help="What the period cost (default: the hours at the price in force).")
@click.option("--currency", help="The plan's currency, with --cost.")
@click.option("--note", help="A note kept with the record.")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def usage_report(plan_id: str, idempotency_key: str | None, **fields: Any) -> None:
    """Append what plan PLAN_ID's run used in a period (a committed plan starts running)."""
    record = {name: value for name, value in fields.items() if value is not None}
    show(settings().client.report_usage(plan_id, idempotency_key=idempotency_key, **record))


@usage.command("list")
@click.argument("plan_id", type=Identifier("plan"))
@limit_option
def usage_list(plan_id: str, limit: int) -> None:
    """Plan PLAN_ID's usage records and reversals, newest first."""
    records = first(settings().client.usage(plan_id), limit)
    show_list(records, USAGE_COLUMNS, optional=("kind", "reporter", "tokens", "period_end"))


@usage.command("reverse")
@click.argument("plan_id", type=Identifier("plan"))
@click.argument("usage_id", type=Identifier("usage record"))
@click.option("--note", help="Why the record was wrong.")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def usage_reverse(plan_id: str, usage_id: str, note: str | None, idempotency_key: str | None) -> None:
    """Take usage record USAGE_ID of plan PLAN_ID back; its period may then be reported again."""
    show(settings().client.reverse_usage(plan_id, usage_id, note=note, idempotency_key=idempotency_key))


@plan.command("compare")
@click.argument("plan_ids", nargs=-1, required=True, type=Identifier("plan"))
def plan_compare(plan_ids: Sequence[str]) -> None:
    """Plans PLAN_IDS (2 to 10) side by side: the fields that differ."""
    comparison = settings().client.compare_plans(list(plan_ids))
    if scripted(comparison):
        return
    plans = comparison["plans"]
    differences = comparison["differences"]
    if settings().output == "csv":  # a row per field, a column per plan (by its whole id)
        rows = [[difference["field"], *difference["values"]] for difference in differences]
        click.echo(csv_text(["field", *(compared["id"] for compared in plans)], rows), nl=False)
        return
    rows = [
        [
            difference["field"],
            *(
                human(difference["field"], value, compared.get("currency"))
                for value, compared in zip(difference["values"], plans, strict=True)
            ),
        ]
        for difference in differences
    ]
    click.echo(table_text(["field", *(compared["id"][:8] for compared in plans)], rows))


# --- Reports ---


@planner.group()
def report() -> None:
    """Reports for finance: costs, planned against actual, and FOCUS exports."""


@report.command("costs")
@click.option(
    "--from",
    "start",
    required=True,
    help="The window's start (ISO 8601): plans' schedules and days of spend.",
)
@click.option("--to", "end", required=True, help="The window's end (exclusive, ISO 8601).")
@click.option(
    "--granularity",
    type=click.Choice(["day", "week", "month", "none"]),
    help="One row per period of this length (default none: one per group).",
)
@click.option(
    "--group-by", help="Up to 3, comma-separated: organization, budget, hardware, status, label:<key>."
)
@click.option("--organization", help="Only this organisation's plans.")
@click.option("--budget-id", help="Only plans charged to this budget.")
@click.option("--hardware", help="Only plans on this hardware profile.")
@click.option(
    "--status",
    help="Plans in these statuses, comma-separated (default committed,running,completed,failed: every plan "
    "whose money is committed, as the API and the console count it).",
)
@click.option(
    "--measure",
    type=click.Choice(["planned", "actual", "both"]),
    help="planned (default): plans' estimates; actual: what runs spent; both: the two and their variance.",
)
# Before --output, the report's own: kept for the scripts that give it, out of the help.
@click.option(
    "--format", "report_format", type=click.Choice(OUTPUTS), hidden=True, help="--output's old name."
)
@click.option(
    "--part",
    type=click.Choice(["rows", "totals"]),
    help="Of the csv: the rows (default: no sum of a column counts twice) or the totals per currency.",
)
def report_costs(start: str, end: str, report_format: str | None, part: str | None, **params: Any) -> None:
    """What plans cost and runs spent, summed by period and group, exactly, never across currencies; planned
    figures spread over each plan's schedule. --output csv prints the server's finance CSV (the rows, or with
    --part totals the totals per currency), which spreadsheets and finance tools read."""
    chosen = settings()
    if report_format:
        chosen.given["output"] = (report_format, "--format")
    if chosen.output == "csv" and not chosen.get:
        click.echo(chosen.client.cost_report_csv(start, end, **params, part=part), nl=False)
        return
    if part is not None:
        raise click.UsageError("--part is for --output csv: the table and the JSON have both.")
    costs = chosen.client.cost_report(start, end, **params)
    if scripted(costs):
        return
    rows = costs["rows"]
    columns = [name for name in (rows[0] if rows else {}) if name not in ("estimated", "currency")]
    # Where the table would not fit: the period's start, its groups and the money kept, the rest left out
    # from the right; a budget by its name, for people, its id the first to go.
    kept = {
        "period_start",
        *costs.get("group_by", ()),
        "cost",
        "planned_cost",
        "actual_cost",
        "variance_cost",
    }
    kept = {*kept - {"budget"}, "budget_name"}
    optional = [name for name in reversed(columns) if name not in kept]
    if "budget" in optional:
        optional.insert(0, optional.pop(optional.index("budget")))
    show_list(rows, columns, optional=optional)
    for total in costs["totals"]:
        click.echo(_total_line(total))


def _total_line(total: Json) -> str:
    currency = total["currency"]
    if "cost" in total:  # planned: the plans' estimates
        plans = f"{total['plans']} plan" + ("" if total["plans"] == 1 else "s")
        return f"total: {plans}, {human('cost', total['cost'], currency)} (estimated)"
    spent = f"{human('cost', total['actual_cost'], currency)} spent"
    if "planned_cost" not in total:
        return f"total: {spent}"
    planned = human("cost", total["planned_cost"], currency)
    variance = human("cost", total["variance_cost"], currency)
    percent = "" if total["variance_percent"] is None else f", {total['variance_percent']:+.2f}%"
    return f"total: {planned} planned, {spent}, variance {variance}{percent}"


@report.command("focus")
@click.option("--from", "start", required=True, help="UTC days of spend beginning at or after this time.")
@click.option("--to", "end", required=True, help="UTC days of spend beginning before this time.")
@click.option(
    "--granularity",
    type=click.Choice(["day", "month"]),
    help="The charge period: a UTC day (default) or a calendar month.",
)
@click.option("--organization", help="Only this organisation's runs.")
@click.option("--budget-id", help="Only runs of plans charged to this budget.")
@click.option("--hardware", help="Only runs on this hardware profile.")
@click.option("--status", help="Runs of plans in these statuses, comma-separated (default: committed money).")
def report_focus(start: str, end: str, **params: Any) -> None:
    """What runs spent as FOCUS 1.2 usage charges, one per plan per day or month, for FinOps tools: a CSV file
    whatever --output says (FOCUS is one)."""
    query = {name: value for name, value in params.items() if value is not None}
    click.echo(settings().client.focus_export(start, end, **query), nl=False)


@report.command("accuracy")
@click.option("--organization", help="Only this organisation's runs (admin keys).")
@click.option("--hardware", help="Only runs on this hardware profile.")
@click.option("--from", "start", help="Usage periods starting at or after this time (ISO 8601).")
@click.option("--to", "end", help="Usage periods starting before this time (ISO 8601).")
@click.option("--detail", is_flag=True, help="Each plan's predicted and measured throughput too.")
def report_accuracy(start: str | None, end: str | None, detail: bool, **params: Any) -> None:
    """Runs' measured throughput against the cluster model's prediction, per hardware profile."""
    query = {name: value for name, value in params.items() if value is not None}
    query |= {name: value for name, value in (("from", start), ("to", end)) if value is not None}
    if detail:
        query["detail"] = "true"
    accuracy = settings().client.model_accuracy(**query)
    if scripted(accuracy):
        return
    columns = ("hardware", "runs", "periods", "accelerator_hours", "mean_error", "rms_error", "worst_error")
    plan_columns = ("plan_id", "name", "predicted_tokens_per_second", "measured_tokens_per_second", "error")
    if settings().output == "csv" and detail:  # the plans, each with its hardware
        plans = [{"hardware": row["hardware"], **plan} for row in accuracy["rows"] for plan in row["plans"]]
        show_list(plans, ("hardware", *plan_columns))
        return
    show_list(accuracy["rows"], columns)
    for row in accuracy["rows"] if detail and settings().table else []:
        click.echo(f"\n{row['hardware']}:")
        show_list(row["plans"], plan_columns)


@planner.group()
def calibration() -> None:
    """Your organisation's own constants for the cluster model, fitted to its measured runs."""


CALIBRATION_COLUMNS = ("id", "organization", "hardware", "matmul_efficiency", "created_at")


@calibration.command("create")
@click.option("--organization", required=True, help="The organisation whose runs it is fitted to.")
@click.option("--hardware", required=True, help="The hardware profile it calibrates.")
@click.option(
    "--plan", "plans", multiple=True, help="Fit to this plan's run (repeat); default: every measured one."
)
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def calibration_create(
    organization: str, hardware: str, plans: Sequence[str], idempotency_key: str | None
) -> None:
    """Fit the cluster model to ORGANIZATION's measured runs on HARDWARE; its later plans there use it."""
    made = settings().client.calibrate(
        organization, hardware, plans=list(plans) or None, idempotency_key=idempotency_key
    )
    if scripted(made):
        return
    if settings().table:
        show({name: made[name] for name in CALIBRATION_COLUMNS})
        click.echo()
    columns = ("plan_id", "name", "measured_tokens_per_second", "error_before", "error_after")
    show_list(made["runs"], columns)  # csv: the runs


@calibration.command("list")
@click.option("--organization", help="Only this organisation's calibrations.")
@click.option("--hardware", help="Only calibrations of this hardware profile.")
@limit_option
def calibration_list(organization: str | None, hardware: str | None, limit: int) -> None:
    """Calibrations, newest first: the newest of an organisation and hardware is the one in force."""
    found = settings().client.calibrations(organization=organization, hardware=hardware)
    show_list(first(found, limit), CALIBRATION_COLUMNS)


@calibration.command("show")
@click.argument("calibration_id", type=Identifier("calibration"))
def calibration_show(calibration_id: str) -> None:
    """Calibration CALIBRATION_ID: its constant, the runs it was fitted to and the errors before and after."""
    show(settings().client.get_calibration(calibration_id))


@planner.group()
def event() -> None:
    """Events: runs started, completed or failed, and thresholds their spend crossed (webhooks send them as
    they happen)."""


@event.command("list")
@click.option("--cursor", help="The next_cursor of the previous call: only events after it.")
@click.option(
    "--type", "types", help="Only these types, comma-separated (e.g. plan.failed,budget.threshold_crossed)."
)
@limit_option
def event_list(cursor: str | None, types: str | None, limit: int) -> None:
    """A page of the events feed, oldest first; prints the cursor to pass next time."""
    page = settings().client.events(cursor=cursor, type=types, limit=limit)
    if scripted(page):  # the page: --get next_cursor prints the cursor
        return
    show_list(page["items"], ("id", "type", "subject.type", "subject.id", "created_at"))  # csv: the events
    if settings().table:
        click.echo(
            f"next cursor: {page['next_cursor']}" + (" (more waiting)" if page.get("has_more") else "")
        )


# --- Webhooks ---


@planner.group()
def webhook() -> None:
    """Webhooks, an organisation's events POSTed to your endpoint as they happen: create, list, show,
    update, delete, rotate-secret, deliveries, redeliver.

    Each delivery is signed as the Standard Webhooks specification says, with the webhook's secret; planner,
    finance and admin keys manage them."""


WEBHOOK_COLUMNS = ("id", "organization", "url", "event_types", "active", "created_at")
DELIVERY_COLUMNS = (
    "id",
    "event_id",
    "status",
    "attempts",
    "last_status_code",
    "next_attempt_at",
    "delivered_at",
    "last_error",
)
EVENT_TYPE_HELP = (
    "An event type it receives, e.g. plan.failed or budget.threshold_crossed (planner event list shows "
    "them); repeatable."
)


@webhook.command("create")
@click.option("--organization", required=True, help="Slug of the organisation whose events it receives.")
@click.option(
    "--url",
    "target",
    required=True,
    help="Where events are POSTed: http or https, a public address unless the server allows internal ones.",
)
@click.option("--event-type", "event_types", multiple=True, help=f"{EVENT_TYPE_HELP} None given: every type.")
@click.option("--description", help="What it is for, e.g. 'Finance bot'.")
@click.option("--inactive", is_flag=True, help="Made inactive: its deliveries wait until it is active.")
def webhook_create(
    organization: str, target: str, event_types: Sequence[str], description: str | None, inactive: bool
) -> None:
    """Register an endpoint for an organisation's events. Its secret (whsec_...), the key of the signatures
    its receiver checks, is shown this once: --get secret prints it alone."""
    fields: Json = {"organization": organization, "url": target}
    if event_types:
        fields["event_types"] = list(event_types)
    if description is not None:
        fields["description"] = description
    if inactive:
        fields["active"] = False
    show(settings().client.create_webhook(**fields))


@webhook.command("list")
@click.option("--organization", help="Only this organisation's webhooks.")
@limit_option
def webhook_list(organization: str | None, limit: int) -> None:
    """Webhooks, newest first (never their secrets)."""
    found = first(settings().client.webhooks(organization=organization, limit=min(limit, 100)), limit)
    show_list(found, WEBHOOK_COLUMNS, optional=("created_at", "organization"))


@webhook.command("show")
@click.argument("webhook_id", type=Identifier("webhook"))
def webhook_show(webhook_id: str) -> None:
    """Webhook WEBHOOK_ID (never its secret)."""
    show(settings().client.get_webhook(webhook_id))


@webhook.command("update")
@click.argument("webhook_id", type=Identifier("webhook"))
@click.option("--url", "target", help="Where events are POSTed from now on.")
@click.option(
    "--event-type", "event_types", multiple=True, help=f"{EVENT_TYPE_HELP} Replaces the types it receives."
)
@click.option("--every-event-type", is_flag=True, help="Receive every type of event from now on.")
@click.option(
    "--active/--inactive", default=None, help="Deliver again, or hold its deliveries until it is active."
)
@click.option("--description", help="What it is for; '' removes it.")
def webhook_update(
    webhook_id: str,
    target: str | None,
    event_types: Sequence[str],
    every_event_type: bool,
    **fields: Any,
) -> None:
    """Change webhook WEBHOOK_ID's url, event types, active or description: the options given."""
    if event_types and every_event_type:
        raise click.UsageError("--event-type names the types, --every-event-type all of them: give one")
    changes: Json = {name: value for name, value in fields.items() if value is not None}
    if changes.get("description") == "":
        changes["description"] = None
    if target is not None:
        changes["url"] = target
    if event_types or every_event_type:
        changes["event_types"] = list(event_types)
    if not changes:
        raise click.UsageError(
            "nothing to change: give --url, --event-type, --active, ... (planner webhook update -h)"
        )
    show(settings().client.update_webhook(webhook_id, changes))


@webhook.command("delete")
@click.argument("webhook_id", type=Identifier("webhook"))
def webhook_delete(webhook_id: str) -> None:
    """Delete webhook WEBHOOK_ID and its deliveries: nothing more is sent to it."""
    settings().client.delete_webhook(webhook_id)
    if settings().table:  # the API answers nothing: JSON and csv have nothing to print
        click.echo(f"deleted {webhook_id}")


@webhook.command("rotate-secret")
@click.argument("webhook_id", type=Identifier("webhook"))
def webhook_rotate_secret(webhook_id: str) -> None:
    """A new secret for webhook WEBHOOK_ID, shown this once and in force at once; until
    previous_secret_until the one it replaces signs beside it, for the receiver to change keys (--get secret
    prints the secret alone)."""
    show(settings().client.rotate_webhook_secret(webhook_id))


@webhook.command("deliveries")
@click.argument("webhook_id", type=Identifier("webhook"))
@click.option(
    "--status", type=click.Choice(["pending", "delivered", "failed"]), help="Only deliveries in this status."
)
@limit_option
def webhook_deliveries(webhook_id: str, status: str | None, limit: int) -> None:
    """Webhook WEBHOOK_ID's deliveries, newest first: each event's attempts, the receiver's last answer."""
    found = settings().client.webhook_deliveries(webhook_id, status=status, limit=min(limit, 100))
    show_list(
        first(found, limit), DELIVERY_COLUMNS, optional=("last_error", "delivered_at", "next_attempt_at")
    )


@webhook.command("redeliver")
@click.argument("webhook_id", type=Identifier("webhook"))
@click.argument("delivery_id", type=Identifier("delivery"))
def webhook_redeliver(webhook_id: str, delivery_id: str) -> None:
    """Send failed delivery DELIVERY_ID of webhook WEBHOOK_ID again: a fresh round of attempts, under the
    same webhook-id header (409 unless it failed)."""
    show(settings().client.retry_webhook_delivery(webhook_id, delivery_id))


# --- Scaling laws ---


@planner.group()
def law() -> None:
    """Scaling laws, published and fitted to your runs: list, show, fit."""


@law.command("list")
@click.option(
    "--kind", type=click.Choice(["published", "fitted"]), help="Only published or only fitted laws."
)
@click.option("--organization", help="Only this organisation's fitted laws (with the published ones).")
@limit_option
def law_list(kind: str | None, organization: str | None, limit: int) -> None:
    """Published laws, then your fitted ones."""
    found = settings().client.scaling_laws(kind=kind, organization=organization, limit=min(limit, 100))
    show_list(first(found, limit), ("slug", "kind", "name", "E", "A", "B", "alpha", "beta"))


@law.command("show")
@click.argument("slug")
def law_show(slug: str) -> None:
    """Law SLUG: its coefficients, and for a fitted law its fit and fitted range."""
    show(settings().client.get_scaling_law(slug))


@law.command("fit")
@click.option("--organization", required=True, help="The organisation the law belongs to.")
@click.option("--name", required=True, help="Its name; its slug is made from it unless --slug is given.")
@click.option("--slug", help="Its slug, e.g. acme-2026-sweep.")
@click.option(
    "--runs",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Your training runs: a CSV file with a header (params, loss, and tokens or flops) or a JSON list.",
)
@click.option("--bootstrap-samples", type=click.IntRange(1), help="Refit this many resamples: 95% intervals.")
@click.option("--seed", type=int, help="Seed of the bootstrap's resampling, for a reproducible fit.")
@click.option("--no-wait", is_flag=True, help="Print the job of a background fit at once, not its law.")
def law_fit(runs: Path, bootstrap_samples: int | None, seed: int | None, no_wait: bool, **law: Any) -> None:
    """Fit a law L = E + A/N^alpha + B/D^beta to your training runs."""
    request: Json = {**{name: value for name, value in law.items() if value}, "runs": read_runs(runs)}
    bootstrap = {
        name: value for name, value in (("samples", bootstrap_samples), ("seed", seed)) if value is not None
    }
    if bootstrap:
        request["bootstrap"] = bootstrap
    show(settings().client.fit_scaling_law(wait=not no_wait, **request))


def read_runs(path: Path) -> list[Json]:
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix.lower() == ".json":
        return json.loads(text)
    rows = csv.DictReader(io.StringIO(text))
    return [{name.strip(): _number(value) for name, value in row.items()} for row in rows]


def _number(cell: str) -> float | str:
    """A CSV cell as the JSON number the API takes (it refuses "5e7" in quotes); other text as it is, for the
    server to name."""
    try:
        return float(cell)
    except (TypeError, ValueError):
        return cell


# --- The config file's profiles, and shell completion ----------------------------------------------------


@planner.group()
def config() -> None:
    """Profiles in the config file: a server, a key and an output format under a name.

    The file is $XDG_CONFIG_HOME/planner/config.toml, by default ~/.config/planner/config.toml (on every
    system alike), in TOML:

    \b
        profile = "prod"     # in force unless --profile or PLANNER_PROFILE says
        [profiles.default]   # what every profile falls back on
        url = "http://127.0.0.1:8000"
        [profiles.prod]
        url = "https://planner.example.com"
        api_key_command = "pass show planner/prod"
        output = "table"

    A profile's keys:

    \b
    - url: the server
    - api_key: the API key (cpk_...)
    - api_key_command: instead of api_key, a command that prints the key (a
      password manager's), run without a shell when a command needs the key
    - output: table, json or csv

    An option or an environment variable wins over the profile, the profile over the default profile
    (planner --help). planner config set writes the file readable by you alone (mode 0600), since it may
    hold a key, and keeps no comments of yours.
    """


CONFIG_COLUMNS = ("current", "profile", "url", "api_key", "api_key_command", "output")


def profile_item(name: str, values: Mapping[str, str], in_force: str) -> Json:
    """A profile as config's commands print it: its key masked (planner key list shows the same id)."""
    key = values.get("api_key")
    item = {
        "current": name == in_force,
        "profile": name,
        **{setting: values.get(setting) for setting in KEYS},
    }
    return {**item, "api_key": None if key is None else masked(key)}


def profile_option(function: Callable) -> Callable:
    return click.option(
        "--profile",
        "target",
        metavar="NAME",
        shell_complete=_profile_names,
        help="The profile to change, made if missing; default: the one in force (planner --help).",
    )(function)


def _changed_profile(target: str | None) -> tuple[Config, str]:
    """The config file and the profile a change is to: --profile's, else the one in force (which may be
    missing yet: a change makes it)."""
    chosen = settings()
    return chosen.config, target or chosen.profile or chosen.config.profile or DEFAULT_PROFILE


def _show_profile(configured: Config, name: str) -> None:
    in_force = configured.profile or DEFAULT_PROFILE
    show(profile_item(name, configured.profiles.get(name, {}), settings().profile or in_force))


@config.command("path")
def config_path_command() -> None:
    """Where the config file is, whether or not it exists yet."""
    path = config_path()
    if settings().table:  # the path alone: `$EDITOR "$(planner config path)"`
        click.echo(path)
    else:
        show({"path": str(path), "exists": path.is_file()})


@config.command("list")
def config_list() -> None:
    """The config file's profiles, their API keys masked; current: the one in force."""
    chosen = settings()
    configured = chosen.config
    in_force = configured.selected(chosen.profile)
    items = [profile_item(name, values, in_force) for name, values in configured.profiles.items()]
    show_list(items, CONFIG_COLUMNS, optional=("api_key_command", "current"))
    if not items and chosen.table:
        click.echo(f"no profiles in {configured.path} yet: planner config set url URL makes one", err=True)


@config.command("set")
@profile_option
@click.argument("key", type=click.Choice(list(KEYS)))
@click.argument("value")
def config_set(target: str | None, key: str, value: str) -> None:
    """Set KEY of a profile to VALUE: url, api_key (VALUE - reads it from the standard input, out of your
    shell's history), api_key_command or output. A key given one way replaces the profile's other way."""
    configured, name = _changed_profile(target)
    if value == "-":
        value = sys.stdin.readline().strip()
    configured.set(name, key, value)
    configured.write()
    _show_profile(configured, name)


@config.command("unset")
@profile_option
@click.argument("key", type=click.Choice(list(KEYS)))
def config_unset(target: str | None, key: str) -> None:
    """Remove KEY from a profile: the default profile's, or the built-in default, applies again."""
    configured, name = _changed_profile(target)
    configured.unset(name, key)
    configured.write()
    _show_profile(configured, name)


@config.command("use")
@click.argument("name", shell_complete=_profile_names)
def config_use(name: str) -> None:
    """Make profile NAME the one in force when neither --profile nor PLANNER_PROFILE names one."""
    configured = settings().config
    configured.use(name)
    configured.write()
    show(profile_item(name, configured.profiles.get(name, {}), name))


SHELLS = ("bash", "zsh", "fish")
COMPLETE_VARIABLE = "_PLANNER_COMPLETE"  # what click's completion asks the command through (its default)


@planner.command(cls=click.Command, short_help="The script that completes planner's commands in a shell")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the script that completes planner's commands, options and choices in SHELL: bash (4.4 or
    newer), zsh or fish.

    Install it once, then open a new shell:

    \b
        echo 'eval "$(planner completion bash)"' >> ~/.bashrc
        echo 'eval "$(planner completion zsh)"' >> ~/.zshrc
        planner completion fish > ~/.config/fish/completions/planner.fish
    """
    complete = get_completion_class(shell)
    click.echo(complete(planner, {}, "planner", COMPLETE_VARIABLE).source())


# --- Running it ---------------------------------------------------------------------------------------------


# The exit status of an API refusal, by its class (README "Command line"), so that a script can tell what to
# do without reading the message: 3 not found, 4 not allowed, 5 a conflict with the resource's state, 6 the
# request is not valid, 7 the server cannot do it now (rate limit, overload, its own failure). 1 is any
# other failure (the server unreachable, a file that cannot be read), 2 a command line that does not parse.
EXIT_NOT_FOUND, EXIT_NOT_ALLOWED, EXIT_CONFLICT, EXIT_INVALID, EXIT_SERVER = 3, 4, 5, 6, 7
EXIT_BY_STATUS = {
    404: EXIT_NOT_FOUND,
    410: EXIT_NOT_FOUND,
    401: EXIT_NOT_ALLOWED,
    403: EXIT_NOT_ALLOWED,
    409: EXIT_CONFLICT,
    412: EXIT_CONFLICT,
    428: EXIT_CONFLICT,
    400: EXIT_INVALID,
    413: EXIT_INVALID,
    415: EXIT_INVALID,
    422: EXIT_INVALID,
    429: EXIT_SERVER,
}


class Problem(click.ClickException):
    """The API's refusal in one line that names what was refused, the problem and each field it names:
    `plan 3f2...: not found (404)`, `budget create: #/amount: Must be ... (422)`; with an exit status by its
    class (EXIT_BY_STATUS; any other 5xx is the server's, any other 4xx 1)."""

    def __init__(self, error: ProblemError, subject: Subject, chosen: Settings):
        super().__init__(f"{subject.name}: {problem_text(error, subject, chosen)}")
        self.exit_code = EXIT_BY_STATUS.get(error.status, EXIT_SERVER if error.status >= 500 else 1)


def problem_text(error: ProblemError, subject: Subject, chosen: Settings) -> str:
    """What the API said was wrong, and its status: each field it names with why, else its detail (for a
    resource the command names, a 404 is `not found`, and why if the API says); a 401 says where the key
    came from, a 5xx the request's id for the server's log."""
    fields = [
        f"{_where(entry)}: {entry.get('detail') or entry.get('title') or 'not valid'}"
        for entry in error.errors
    ]
    if fields:
        said = " ".join(fields)
    elif error.status in (404, 410) and subject.resource:  # the detail's why, when it says one
        why = (error.detail or "").partition(": ")[2].rstrip(".")
        said = f"not found: {why}" if why else "not found"
    else:
        said = error.detail or error.title or "refused"
    status = str(error.status)
    if error.status == 401:
        source = chosen.api_key()[1]
        status += "; no key given" if source == NO_KEY else f"; key from {source}"
    if error.status >= 500 and error.request_id:
        status += f"; request {error.request_id}"
    return f"{said} ({status})"


def _where(entry: Json) -> str:
    """The field a problem's entry names: its JSON pointer (#/amount, #/layout/zero_stage), or the query
    parameter or header."""
    if entry.get("pointer"):
        return entry["pointer"]
    if entry.get("parameter"):
        return f"parameter {entry['parameter']}"
    return f"header {entry['header']}" if entry.get("header") else "request"


@dataclass(frozen=True)
class Subject:
    """What a command acts on, as an error names it: a resource by its id or slug (`plan 3f2...`), else the
    command (`budget create`)."""

    name: str
    resource: bool


# The argument that names the resource a command acts on, and the resource's name (an argument `slug`: its
# command group's).
RESOURCE_ARGUMENTS = {
    "plan_id": "plan",
    "budget_id": "budget",
    "key_uuid": "key",
    "calibration_id": "calibration",
    "webhook_id": "webhook",
    "slug": None,
}


def subject(ctx: click.Context) -> Subject:
    """What the command of `ctx` acts on: the resource its one naming argument names, else the command."""
    path = ctx.command_path.split()[1:]
    arguments = [param for param in ctx.command.params if isinstance(param, click.Argument)]
    if len(arguments) == 1 and arguments[0].name in RESOURCE_ARGUMENTS and arguments[0].nargs == 1:
        resource = RESOURCE_ARGUMENTS[arguments[0].name] or path[0]
        return Subject(f"{resource} {ctx.params[arguments[0].name]}", resource=True)
    return Subject(" ".join(path), resource=False)


class ConfigProblem(click.ClickException):
    """A config file that cannot be used, or a profile it does not have: the file and the problem."""

    exit_code = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 done; 3-7 the API refused, by class (EXIT_BY_STATUS); 1 any other failure (the error
    on stderr), and, saying nothing, the output's reader closing the pipe (`planner plan list | head`:
    click's own handling of EPIPE); 2 a command line or config file that is wrong."""
    try:
        code = planner.main(args=argv, prog_name="planner", standalone_mode=False)
    except click.UsageError as error:  # click's own: the usage, and the error
        error.show()
        return error.exit_code
    except click.ClickException as error:
        click.echo(f"planner: {error.format_message()}", err=True)
        return error.exit_code
    except click.Abort:
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())

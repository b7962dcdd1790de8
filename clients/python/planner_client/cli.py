"""`planner`: the Compute Planner API from a shell, on top of planner_client.PlannerClient.

    export PLANNER_URL=http://127.0.0.1:8000 PLANNER_API_KEY=cpk_...
    planner allocate --pf-days 6000
    planner estimate --params 70e9 --tokens 1.4e12 --hardware h100-sxm --days 30 --layers 80 --d-model 8192 \
        --heads 64 --kv-heads 8 --sequence-length 8192
    planner layout --params 70e9 --tokens 1.4e12 --hardware h100-sxm --accelerators 1024 --tensor-parallel 8
    planner plan create --organization acme --budget-id <id> --pf-days 6000 --hardware h100-sxm \
        --accelerators 1024
    planner plan commit <plan id>
    planner report costs --from 2026-01-01T00:00:00Z --to 2027-01-01T00:00:00Z --group-by budget --format csv

Results print as tables in the units people read (65.7B parameters, 80 GB, 989.4 TFLOP/s, 23.7 days,
1,000,000.00 USD); `--json` prints the API's JSON instead and `--get FIELD` one field, for scripts. An error
prints the problem's detail and each invalid field, and exits 1 (2 for a command line that does not parse).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from itertools import islice
from pathlib import Path
from typing import Any

import click
import requests
from tabulate import SEPARATING_LINE, tabulate

from planner_client import __version__
from planner_client.client import PlannerClient, ProblemError

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
    ("zero_stage", int, "ZeRO stage, 0 (default) to 3: how model states are sharded."),
    ("tensor_parallel", int, "Tensor-parallel degree; default 1."),
    ("recomputation", str, "Activation recomputation (with a shape in --body): none, selective or full."),
    ("sequence_parallel", bool, "Sequence parallelism with tensor parallelism (default on)."),
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
# cluster fields (the deprecated top-level layout fields left to allocate and plan), then the model's shape,
# its layout and what goodput needs, sent as the request's `shape`, `layout` and `reliability` objects.
LAYOUT_NAMES = ("tensor_parallel", "zero_stage", "recomputation", "sequence_parallel")
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
    *(field for field in CLUSTER_FIELDS[2:] if field[0] not in LAYOUT_NAMES),
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


# --- What every command shares: the client, and how the answer is printed -----------------------------------


@dataclass
class Settings:
    url: str | None
    api_key: str | None
    json: bool = False
    get: str | None = None
    _client: PlannerClient | None = None

    @property
    def client(self) -> PlannerClient:
        if self._client is None:
            # A person waits at the terminal: a server that is down is said at once, not after retries.
            self._client = PlannerClient(self.url, self.api_key, connect_retries=0)
        return self._client


def settings() -> Settings:
    return click.get_current_context().find_object(Settings)


def _as_json(ctx: click.Context, _param, value: bool) -> None:
    if value:
        ctx.find_object(Settings).json = True


def _get(ctx: click.Context, _param, value: str | None) -> None:
    if value:
        ctx.find_object(Settings).get = value


class Command(click.Command):
    """A command whose answer prints as a table, or as JSON (--json) or one field (--get) for scripts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.params += [
            click.Option(
                ["--json"],
                is_flag=True,
                expose_value=False,
                callback=_as_json,
                help="Print the API's JSON rather than a table.",
            ),
            click.Option(
                ["--get"],
                metavar="FIELD",
                expose_value=False,
                callback=_get,
                help="Print only this field of the answer (of each item of a list), e.g. id.",
            ),
        ]


class Group(click.Group):
    command_class = Command
    group_class = type  # subgroups are Groups, their commands Commands

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, turning what the server or the files said into errors the command line shows."""
        if ctx.parent is not None:
            return super().invoke(ctx)
        try:
            return super().invoke(ctx)
        except ProblemError as error:
            raise Problem(error) from error
        except requests.RequestException as error:
            raise click.ClickException(_unreachable(ctx.obj.client, error)) from error
        except BrokenPipeError:  # the output's reader went away: `main` ends quietly
            raise
        except (OSError, ValueError) as error:  # a --body or --runs file that cannot be read
            raise click.ClickException(str(error)) from error


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


def show(body: Json, rows: Callable[[Json], Rows] | None = None) -> None:
    """One answer: a table of its rows (default: every field), its JSON, or one field of it."""
    chosen = settings()
    if chosen.get:
        click.echo(_text(_field(body, chosen.get)))
    elif chosen.json:
        click.echo(json.dumps(body, indent=2))
    else:
        click.echo(tabulate((rows or flat_rows)(body), tablefmt="plain", disable_numparse=True))


def show_list(
    items: Iterable[Json], columns: Sequence[str], headers: Mapping[str, str] | None = None
) -> None:
    """A list's items: a table of `columns` (headed by their name, or by `headers` where it has one), their
    JSON, or one field of each, a line each."""
    chosen = settings()
    items = list(items)
    if chosen.get:
        for item in items:
            click.echo(_text(_field(item, chosen.get)))
    elif chosen.json:
        click.echo(json.dumps(items, indent=2))
    else:
        table = [
            [human(name, _field(item, name, None), item.get("currency")) for name in columns]
            for item in items
        ]
        names = [(headers or {}).get(name, name) for name in columns]
        click.echo(tabulate(table, headers=names, tablefmt="simple", disable_numparse=True))


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
    return json.dumps(value) if isinstance(value, dict | list) else "" if value is None else str(value)


def first(items: Iterator[Json], limit: int) -> list[Json]:
    return list(islice(items, limit))


# --- Figures as people read them ----------------------------------------------------------------------------

Rows = list[list[str]]
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
}
MONEY_RATES = {"price_per_hour": "/h", "burn_rate_per_day": "/day"}
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
        return (
            f"{_money(value)} {currency}{MONEY_RATES.get(field, '')}"
            if field in MONEY and currency
            else value
        )
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


def _money(amount: str) -> str:
    try:
        return f"{Decimal(amount):,}"
    except InvalidOperation:
        return amount


def flat_rows(body: Json, prefix: str = "", currency: str | None = None) -> Rows:
    """Every field of an answer, nested ones by dotted name; lists of objects are left to --json."""
    currency = body.get("currency", currency)
    rows: Rows = []
    for name, value in body.items():
        if isinstance(value, dict):
            rows += flat_rows(value, f"{prefix}{name}.", currency)
        elif not (isinstance(value, list) and any(isinstance(item, dict) for item in value)):
            rows.append([prefix + name, human(prefix + name, value, currency)])
    return rows


def named_rows(body: Json, names: Iterable[str]) -> Rows:
    return [
        [name, human(name, body[name], body.get("currency"))] for name in names if body.get(name) is not None
    ]


def warning_rows(body: Json) -> Rows:
    return [["warning", f"{warning['code']}: {warning['message']}"] for warning in body.get("warnings") or []]


def estimate_rows(estimate: Json, *, experts: bool = True) -> Rows:
    """A run's time, cost and pace: with the cluster model's performance, its MFU, layout, steps and
    goodput (and of a mixture of experts, unless `experts` is false, its active parameters and experts);
    with a given MFU, that."""
    rows = named_rows(estimate, ("days", "accelerator_hours"))
    if estimate.get("accelerators") is not None:
        rows.append(["accelerators", accelerators_text(estimate)])
    rows += named_rows(estimate, ("cost",))
    if intervals := estimate.get("intervals"):
        rows.append(
            [f"{intervals['confidence']:.0%} interval", interval_text(intervals, estimate.get("currency"))]
        )
    performance = estimate.get("performance")
    if performance:
        layout = performance["layout"]
        batch = f"{layout['global_batch']:,} sequences ({_count(performance['tokens_per_step'])} tokens)"
        rows += experts_rows(performance) if experts else []
        rows += [
            ["MFU", _percent(performance["mfu"])],
            ["HFU", _percent(performance["hfu"])],
            ["layout", layout_line(layout, experts=is_mixture(performance))],
            ["steps", f"{performance['steps']:,} of {_plain(performance['step_seconds'])} s, {batch} each"],
            ["goodput", goodput_text(performance["goodput"])],
        ]
        if framework := performance.get("framework"):  # servers before issue 48 name none
            rows.append(["framework", framework])
        if efficiency := performance.get("hardware_efficiency"):
            rows.append(["hardware efficiency", efficiency_text(efficiency)])
    elif estimate.get("mfu") is not None:
        rows.append(["MFU", f"{_percent(estimate['mfu'])} (given: the cluster model is not used)"])
    if memory := estimate.get("memory"):
        rows.append(["memory per accelerator", memory_text(memory)])
    if (energy := estimate.get("energy")) and energy.get("energy_kwh") is not None:
        rows.append(["energy", energy_text(energy)])
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


def experts_rows(performance: Json) -> Rows:
    """Of a mixture of experts: the parameters a token passes through, of all, and its experts."""
    if not is_mixture(performance):
        return []
    shape = performance["shape"]
    experts = f"{shape['experts']:,}, {shape['experts_per_token']} per token"
    if shape.get("shared_experts"):
        experts += f" + {shape['shared_experts']} shared"
    if shape.get("moe_layers") is not None:
        experts += f", on {shape['moe_layers']} of {shape['layers']} layers"
    return [
        ["active params", f"{_count(shape['active_params'])} of {_count(shape['params'])}"],
        ["experts", experts],
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
    rows += [SEPARATING_LINE, ["step", seconds(step), _percent(1)]]
    headers = ["step time", "seconds", "% of step"]
    return tabulate(
        rows, headers, tablefmt="simple", disable_numparse=True, colalign=("left", "right", "right")
    )


def layouts_table(performance: Json) -> str:
    """The chosen layout, then the alternatives the search ranked next: a row each."""
    chosen = {name: performance[name] for name in ("layout", "step_seconds", "mfu", "memory_bytes")}
    ranked = [chosen, *performance["alternatives"]]
    with_context = any(option["layout"].get("context_parallel", 1) != 1 for option in ranked)
    with_experts = is_mixture(performance) or any(
        option["layout"].get("expert_parallel", 1) != 1 for option in ranked
    )
    seconds = _seconds_shown(performance["step_seconds"])
    rows = []
    for k, option in enumerate(ranked):
        layout = option["layout"]
        rows.append(
            [
                "chosen" if k == 0 else "",
                layout["tensor_parallel"],
                layout["pipeline_parallel"],
                layout["data_parallel"],
                *([layout.get("context_parallel", 1)] if with_context else []),
                *(
                    [layout.get("expert_parallel", 1), "yes" if layout.get("expert_overlap") else "no"]
                    if with_experts
                    else []
                ),
                layout["micro_batch"],
                layout["interleave"],
                layout["recomputation"],
                layout["zero_stage"],
                f"{layout['global_batch']:,}",
                seconds(option["step_seconds"]),
                f"{option['mfu'] * 100:.1f}",
                f"{option['memory_bytes'] / 1e9:.1f}",
            ]
        )
    headers = ["", "TP", "PP", "DP", *(["CP"] if with_context else [])]
    headers += [*(["EP", "overlap"] if with_experts else []), "micro-batch", "interleave"]
    headers += ["recomputation", "ZeRO", "global batch", "step s", "MFU %", "memory GB"]
    align = ["left", *["right"] * (len(headers) - 1)]
    align[headers.index("recomputation")] = "left"
    if with_experts:
        align[headers.index("overlap")] = "left"
    return tabulate(rows, headers, tablefmt="simple", disable_numparse=True, colalign=align)


def layout_rows(estimate: Json) -> Rows:
    performance = estimate["performance"]
    layout = performance["layout"]
    step = f"{_plain(performance['step_seconds'])} s at {_percent(performance['mfu'])} MFU"
    searched = (
        f"{performance['layouts_evaluated']:,} evaluated, {performance['layouts_fitting']:,} fit in memory"
    )
    rows = [
        ["layout", layout_line(layout, experts=is_mixture(performance))],
        *experts_rows(performance),
        ["global batch", f"{layout['global_batch']:,} sequences"],
        ["step", step],
        ["accelerators", accelerators_text(estimate)],
    ]
    if memory := estimate.get("memory"):
        rows.append(["memory per accelerator", memory_text(memory)])
    return [*rows, ["layouts", searched], *warning_rows(estimate)]


def allocated_experts_rows(allocation: Json) -> Rows:
    """Of a mixture of experts an allocation (or a plan's result) names: its active parameters and experts."""
    rows = []
    if allocation.get("active_params") is not None:
        rows.append(
            ["active params", f"{_count(allocation['active_params'])} of {_count(allocation['params'])}"]
        )
    if allocation.get("experts"):
        rows.append(["experts", f"{allocation['experts']:,}, {allocation['experts_per_token']} per token"])
    return rows


def allocation_rows(body: Json) -> Rows:
    """An allocation: N and D, and of a mixture of experts a law sized, its active parameters and experts
    (which the estimate's modelled shape then does not repeat)."""
    rows = named_rows(body, ("method", "params")) + allocated_experts_rows(body)
    rows += named_rows(body, ("tokens", "tokens_per_param", "flops", "pf_days", "predicted_loss"))
    if body.get("law"):
        rows.append(["law", body["law"]["slug"]])
    if body.get("estimate"):
        rows += estimate_rows(body["estimate"], experts=body.get("active_params") is None)
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
    experts = allocated_experts_rows(result) or experts_rows(performance)
    return named_rows(plan, PLAN_ROWS) + approval_rows(plan) + experts + warning_rows(result)


def approval_rows(plan: Json) -> Rows:
    """Who asked for the plan's approval, and what was decided (nothing for a plan that never asked)."""
    approval = plan.get("approval")
    if not approval:
        return []
    asked = f"asked {approval['requested_at']} by {approval['requested_by']}"
    if approval["decision"] is None:
        return [["approval", f"{asked}; waiting for a finance or admin key"]]
    decided = f"{approval['decision']} {approval['decided_at']} by {approval['decided_by']}"
    note = f": {approval['note']}" if approval.get("note") else ""
    return [["approval", f"{asked}; {decided}{note}"]]


# --- The command tree ---------------------------------------------------------------------------------------


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option(
    "--url", envvar="PLANNER_URL", help="The server; default $PLANNER_URL, else http://127.0.0.1:8000."
)
@click.option("--api-key", envvar="PLANNER_API_KEY", help="The API key; default $PLANNER_API_KEY.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the API's JSON rather than tables (any command)."
)
@click.version_option(__version__, "--version", prog_name="planner", message="%(prog)s %(version)s")
@click.pass_context
def planner(ctx: click.Context, url: str | None, api_key: str | None, as_json: bool) -> None:
    """The Compute Planner API from a shell: plans, budgets, hardware, laws, reports and keys."""
    ctx.obj = Settings(url, api_key, json=as_json)


@planner.command()
@fields_options(BUDGET_FIELDS, RULE_FIELDS, CLUSTER_FIELDS)
@body_option
def allocate(body: Path | None, **options: Any) -> None:
    """Model size and tokens for a compute budget: give one budget (FLOPs, PF-days, money, accelerator-hours,
    days or a target loss) and optionally a law and a cluster."""
    request = request_body(options, BUDGET_FIELDS, RULE_FIELDS, CLUSTER_FIELDS, body=body)
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
    request = request_body(options, *field_sets, body=body)
    for name, fields in NESTED_FIELDS.items():
        if given := request_body(options, fields):
            from_body = request.get(name)
            request[name] = {**(from_body if isinstance(from_body, dict) else {}), **given}
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
    show(answer, lambda answer: [*estimate_rows(answer), *warning_rows(answer)])
    chosen = settings()
    if answer.get("performance") and not (chosen.json or chosen.get):
        click.echo()
        click.echo(breakdown_table(answer["performance"]))


@planner.command()
@modelled_options(*LAYOUT_REQUEST)
@body_option
def layout(body: Path | None, **options: Any) -> None:
    """The parallel layout the cluster model chooses for training a given model (--params, --tokens) on a
    cluster, and the alternatives it ranked next: the same options as estimate (but --mfu); layout options
    given are kept, the others searched."""
    answer = settings().client.estimate(**modelled_request(options, LAYOUT_REQUEST, body))
    chosen = settings()
    if chosen.json or chosen.get:
        show(answer)
        return
    if not answer.get("performance"):
        raise click.ClickException(
            "the answer has no layout: an mfu in the request overrides the cluster model"
        )
    show(answer, layout_rows)
    click.echo()
    click.echo(layouts_table(answer["performance"]))


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
HARDWARE_HEADERS = {
    "accelerators_per_node": "per node",
    "scale_up_bandwidth_bytes_per_second": "scale-up each way",
    "scale_out_bandwidth_bytes_per_second": "scale-out each way",
}


@hardware.command("list")
@click.option("--vendor", help="Only this vendor's, e.g. NVIDIA.")
@click.option("--precision", help="Only profiles with a peak at this precision, e.g. fp8.")
@limit_option
def hardware_list(vendor: str | None, precision: str | None, limit: int) -> None:
    """Hardware profiles: the built-in catalog, then yours."""
    found = settings().client.hardware(vendor=vendor, precision=precision, limit=min(limit, 100))
    show_list(first(found, limit), HARDWARE_COLUMNS, HARDWARE_HEADERS)


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
    rows = [
        ["rows", report["rows"]],
        ["created", len(report["created"])],
        ["updated", len(report["updated"])],
        ["unchanged", report["unchanged"]],
        ["without accelerator", report["without_accelerator"]],
        ["refused", report["refused_count"]],
    ]
    rows += [
        [f"line {row['line']}", f"{row['instance_type'] or ''} {row['accelerator'] or ''}: {row['reason']}"]
        for row in report["refused"][:20]
    ]
    if report["dry_run"]:
        rows.append(["dry run", "nothing stored"])
    return rows


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
COMPARISON_HEADERS = {
    "energy.energy_kwh": "kWh",
    "energy.emissions_kg_co2e": "kg CO2e",
    "accelerators": "count",
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
    chosen = settings()
    if chosen.json or chosen.get:
        show(result)
        return
    rows = [
        {**row, "currency": result["currency"], "frontier": "*" if row["on_frontier"] else ""}
        for row in result["offers"]
    ]
    show_list(rows, COMPARISON_COLUMNS, COMPARISON_HEADERS)
    for row in result["unable"]:
        click.echo(f"{row['offer']}: cannot: {row['reason']}")
    for row in result["offers"] if save else ():
        plan = settings().client.create_plan(**row["plan"], organization=save)
        click.echo(f"{row['offer']}: saved as plan {plan['id']}")


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
@click.argument("budget_id")
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
    show_list(found, ("id", "name", "organization", "amount", "committed", "remaining", "period_end"))


@budget.command("show")
@click.argument("budget_id")
def budget_show(budget_id: str) -> None:
    """Budget BUDGET_ID: its amount, what is committed and what remains."""
    show(settings().client.get_budget(budget_id))


@budget.command("forecast")
@click.argument("budget_id")
def budget_forecast(budget_id: str) -> None:
    """Budget BUDGET_ID now and at completion: committed, spent, remaining, each running plan's forecast."""
    forecast = settings().client.budget_forecast(budget_id)
    chosen = settings()
    if chosen.json or chosen.get:
        show(forecast)
        return
    currency = forecast["currency"]
    summary = {name: value for name, value in forecast.items() if name not in ("running", "intervals")}
    if forecast.get("intervals"):
        summary["estimate_at_completion_band"] = band_text(forecast["intervals"], currency)
    show(summary)
    click.echo()
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
    show_list(running, columns)


def band_text(intervals: Json, currency: str) -> str:
    """An estimate at completion's band as the CLI prints it: "80%: 420.00-870.00 USD, P50 610.00"."""
    low, high = intervals["estimate_at_completion"]
    band = f"{round(100 * intervals['confidence'])}%: {_money(low)}-{_money(high)} {currency}"
    median = intervals.get("estimate_at_completion_p50")
    return band if median is None or low == high else f"{band}, P50 {_money(median)}"


@budget.command("utilization")
@click.argument("budget_id")
def budget_utilization(budget_id: str) -> None:
    """Budget BUDGET_ID month by month: committed, running total, burn rate, when it runs out."""
    use = settings().client.budget_utilization(budget_id)
    chosen = settings()
    if chosen.json or chosen.get:
        show(use)
        return
    show({name: value for name, value in use.items() if name != "months"})
    click.echo()
    months = [{**month, "currency": use["currency"]} for month in use["months"]]
    show_list(months, ("month", "plans", "committed", "cumulative"))


@budget.command("ledger")
@click.argument("budget_id")
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
    show_list(keys, ("id", "key_id", "name", "role", "organization", "revoked_at", "last_used_at"))


@key.command("revoke")
@click.argument("key_uuid")
def key_revoke(key_uuid: str) -> None:
    """Revoke key KEY_UUID (its id in planner key list): it stops working at once."""
    settings().client.revoke_key(key_uuid)
    if not settings().json:
        click.echo(f"revoked {key_uuid}")


# --- Plans ---


@planner.group()
def plan() -> None:
    """Plans: create, list, show, revise, commit, approve or reject, cancel, compare."""


PLAN_REQUEST = (PLAN_FIELDS, ESTIMATE_MODEL_FIELDS, BUDGET_FIELDS, RULE_FIELDS, CLUSTER_FIELDS)


def plan_request_options(function: Callable) -> Callable:
    options = [
        fields_options(*PLAN_REQUEST),
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
    request = request_body(options, *field_sets, body=options.pop("body"))
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
@click.argument("plan_id")
@plan_request_options
@click.option(
    "--unset", multiple=True, metavar="FIELD", help="Remove an input of the plan, e.g. law; repeatable."
)
def plan_revise(plan_id: str, unset: Sequence[str], **options: Any) -> None:
    """A new draft from plan PLAN_ID's request with the options given changed (e.g. --budget-id,
    --accelerators), linked to it by parent_id."""
    changes = {**dict.fromkeys(unset), **plan_request(options, *PLAN_REQUEST)}
    client = settings().client
    show(client.revise_plan(plan_id, changes, idempotency_key=options["idempotency_key"]), plan_rows)


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
    show_list(
        found, ("id", "name", "status", "organization", "params", "tokens", "days", "cost", "created_at")
    )


@plan.command("show")
@click.argument("plan_id")
def plan_show(plan_id: str) -> None:
    """Plan PLAN_ID (--json adds its inputs, snapshot and result)."""
    show(settings().client.get_plan(plan_id), plan_rows)


@plan.command("commit")
@click.argument("plan_id")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_commit(plan_id: str, idempotency_key: str | None) -> None:
    """Reserve draft PLAN_ID's cost, FLOPs and accelerator-hours on its budget (409 if they do not fit); a
    plan costing more than its budget's approval_above waits for approval instead (pending_approval)."""
    show(settings().client.commit_plan(plan_id, idempotency_key=idempotency_key), plan_rows)


@plan.command("approve")
@click.argument("plan_id")
@click.option("--note", help="Why (kept with the plan and sent with its event).")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_approve(plan_id: str, note: str | None, idempotency_key: str | None) -> None:
    """Approve plan PLAN_ID, pending approval (finance): it is committed, reserved on its budget now."""
    approved = settings().client.approve_plan(plan_id, note=note, idempotency_key=idempotency_key)
    show(approved, plan_rows)


@plan.command("reject")
@click.argument("plan_id")
@click.option("--note", required=True, help="Why not (kept with the plan and sent with its event).")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_reject(plan_id: str, note: str, idempotency_key: str | None) -> None:
    """Reject plan PLAN_ID, pending approval (finance): nothing is reserved on its budget."""
    show(settings().client.reject_plan(plan_id, note=note, idempotency_key=idempotency_key), plan_rows)


@plan.command("cancel")
@click.argument("plan_id")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_cancel(plan_id: str, idempotency_key: str | None) -> None:
    """Cancel plan PLAN_ID; a committed plan gives its reservation back to its budget."""
    show(settings().client.cancel_plan(plan_id, idempotency_key=idempotency_key), plan_rows)


@plan.command("start")
@click.argument("plan_id")
@click.option("--started-at", help="When the run began (ISO 8601); now by default.")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_start(plan_id: str, started_at: str | None, idempotency_key: str | None) -> None:
    """Committed plan PLAN_ID's run began (its first usage record starts it too)."""
    started = settings().client.start_plan(plan_id, started_at=started_at, idempotency_key=idempotency_key)
    show(started, plan_rows)


@plan.command("complete")
@click.argument("plan_id")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def plan_complete(plan_id: str, idempotency_key: str | None) -> None:
    """Running plan PLAN_ID's run completed: what it did not spend goes back to its budget."""
    show(settings().client.complete_plan(plan_id, idempotency_key=idempotency_key), plan_rows)


@plan.command("fail")
@click.argument("plan_id")
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
@click.argument("plan_id")
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
@click.argument("plan_id")
@limit_option
def usage_list(plan_id: str, limit: int) -> None:
    """Plan PLAN_ID's usage records and reversals, newest first."""
    show_list(first(settings().client.usage(plan_id), limit), USAGE_COLUMNS)


@usage.command("reverse")
@click.argument("plan_id")
@click.argument("usage_id")
@click.option("--note", help="Why the record was wrong.")
@click.option("--idempotency-key", help=IDEMPOTENCY_HELP)
def usage_reverse(plan_id: str, usage_id: str, note: str | None, idempotency_key: str | None) -> None:
    """Take usage record USAGE_ID of plan PLAN_ID back; its period may then be reported again."""
    show(settings().client.reverse_usage(plan_id, usage_id, note=note, idempotency_key=idempotency_key))


@plan.command("compare")
@click.argument("plan_ids", nargs=-1, required=True)
def plan_compare(plan_ids: Sequence[str]) -> None:
    """Plans PLAN_IDS (2 to 10) side by side: the fields that differ."""
    comparison = settings().client.compare_plans(list(plan_ids))
    chosen = settings()
    if chosen.json or chosen.get:
        show(comparison)
        return
    ids = [compared["id"][:8] for compared in comparison["plans"]]
    rows = [
        [difference["field"], *(human(difference["field"], value) for value in difference["values"])]
        for difference in comparison["differences"]
    ]
    click.echo(tabulate(rows, headers=["field", *ids], tablefmt="simple", disable_numparse=True))


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
@click.option(
    "--format",
    "output",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    help="table (default), csv as finance tools read it, or json.",
)
@click.option(
    "--part",
    type=click.Choice(["rows", "totals"]),
    help="Of the csv: the rows (default: no sum of a column counts twice) or the totals per currency.",
)
def report_costs(start: str, end: str, output: str, part: str | None, **params: Any) -> None:
    """What plans cost and runs spent, summed by period and group, exactly, never across currencies; planned
    figures spread over each plan's schedule."""
    client = settings().client
    if output == "csv":
        click.echo(client.cost_report_csv(start, end, **params, part=part), nl=False)
        return
    if part is not None:
        raise click.UsageError("--part is for --format csv: the table and the json have both.")
    costs = client.cost_report(start, end, **params)
    chosen = settings()
    chosen.json = chosen.json or output == "json"
    if chosen.json or chosen.get:
        show(costs)
        return
    rows = costs["rows"]
    show_list(rows, [name for name in (rows[0] if rows else {}) if name not in ("estimated", "currency")])
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
    """What runs spent as FOCUS 1.2 usage charges (CSV), one per plan per day or month, for FinOps tools."""
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
    chosen = settings()
    if chosen.json or chosen.get:
        show(accuracy)
        return
    columns = ("hardware", "runs", "periods", "accelerator_hours", "mean_error", "rms_error", "worst_error")
    show_list(accuracy["rows"], columns)
    for row in accuracy["rows"] if detail else []:
        click.echo(f"\n{row['hardware']}:")
        plan_columns = (
            "plan_id",
            "name",
            "predicted_tokens_per_second",
            "measured_tokens_per_second",
            "error",
        )
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
    chosen = settings()
    if chosen.json or chosen.get:
        show(made)
        return
    show({name: made[name] for name in CALIBRATION_COLUMNS})
    click.echo()
    columns = ("plan_id", "name", "measured_tokens_per_second", "error_before", "error_after")
    show_list(made["runs"], columns)


@calibration.command("list")
@click.option("--organization", help="Only this organisation's calibrations.")
@click.option("--hardware", help="Only calibrations of this hardware profile.")
@limit_option
def calibration_list(organization: str | None, hardware: str | None, limit: int) -> None:
    """Calibrations, newest first: the newest of an organisation and hardware is the one in force."""
    found = settings().client.calibrations(organization=organization, hardware=hardware)
    show_list(first(found, limit), CALIBRATION_COLUMNS)


@calibration.command("show")
@click.argument("calibration_id")
def calibration_show(calibration_id: str) -> None:
    """Calibration CALIBRATION_ID: its constant, the runs it was fitted to and the errors before and after."""
    show(settings().client.get_calibration(calibration_id))


@planner.group()
def event() -> None:
    """Events: runs started, completed or failed, and thresholds their spend crossed."""


@event.command("list")
@click.option("--cursor", help="The next_cursor of the previous call: only events after it.")
@click.option(
    "--type", "types", help="Only these types, comma-separated (e.g. plan.failed,budget.threshold_crossed)."
)
@limit_option
def event_list(cursor: str | None, types: str | None, limit: int) -> None:
    """A page of the events feed, oldest first; prints the cursor to pass next time."""
    page = settings().client.events(cursor=cursor, type=types, limit=limit)
    chosen = settings()
    if chosen.json or chosen.get:
        show(page)
        return
    show_list(page["items"], ("id", "type", "subject.type", "subject.id", "created_at"))
    click.echo(f"next cursor: {page['next_cursor']}" + (" (more waiting)" if page.get("has_more") else ""))


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
    """The API's refusal, as the command line shows it: the problem's detail and each invalid field, and
    an exit status by its class (EXIT_BY_STATUS; any other 5xx is the server's, any other 4xx 1)."""

    def __init__(self, error: ProblemError):
        super().__init__(f"{error.status} {error.title}: {error.detail}")
        self.errors = error.errors
        self.exit_code = EXIT_BY_STATUS.get(error.status, EXIT_SERVER if error.status >= 500 else 1)

    def show(self, file=None) -> None:
        super().show(file)
        for entry in self.errors:
            where = entry.get("pointer") or entry.get("parameter") or entry.get("header") or ""
            click.echo(f"  {where}: {entry.get('detail')}", file=file, err=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 done; 3-7 the API refused, by class (EXIT_BY_STATUS); 1 any other failure (the error
    on stderr), and, saying nothing, the output's reader closing the pipe (`planner plan list | head`:
    click's own handling of EPIPE); 2 a command line that is wrong."""
    try:
        code = planner.main(args=argv, prog_name="planner", standalone_mode=False)
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())

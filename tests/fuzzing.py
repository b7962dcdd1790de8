"""What the fuzz tests share: the OpenAPI description as schemathesis loads it, with the hooks that keep the
requests it draws to the rules the description states but JSON Schema cannot, so that every check runs on
every operation, positive_data_acceptance included (valid requests must be accepted).

JSON Schema states which fields go together (each component's allOf); the description says the rest in words
and, where it can, in an extension (`x-greater-than`, `x-propertyNames`). The hooks follow schemathesis' guide
to extending it: requests draw real values for what must exist (an organisation, a budget, a catalog profile,
a published law) and only combinations the stated rules admit. A hook never drops a check; it shapes what is
drawn, and each says the rule it keeps to.
"""

from __future__ import annotations

import copy
import math
import re
import tomllib
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import schemathesis
from schemathesis.config import SchemathesisConfig

from service.core.shape import ModelShape
from service.core.units import MAX_PARAMS, PF_DAY_FLOPS
from service.core.validation import InvalidInput
from service.infra.egress import literal_address

# The profile requests name: priced (in USD) and with a peak at every precision but int8.
PROFILE = "h100-sxm"
PROFILE_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
PROFILE_FASTEST_PEAK = 1978.9e12  # FLOP/s, the catalog's at fp8
LAWS = ("chinchilla-2022", "epoch-2024")
SCHEMATHESIS_TOML = Path(__file__).resolve().parent.parent / "schemathesis.toml"


# The planning engine refuses (422, naming the field) runs whose figures leave what it answers for: over
# 1e35 FLOPs, 1e16 parameters or 1e18 tokens, a cost over 1e12, a run ending after the year 9998, a target
# loss it cannot reach. No schema can say which combinations of in-range numbers do (the operations'
# descriptions say it in words). Drawn planning figures are taken to magnitudes real plans have, where none
# does: a value in (low, high), log-uniform, chosen by the drawn value.
MAGNITUDES = {
    "flops": (1e18, 1e24),
    "pf_days": (0.1, 1e4),
    "accelerator_hours": (10, 1e7),
    "days": (1, 100),
    "tokens_per_param": (1, 1000),
    "unique_tokens": (1e9, 1e13),
    "inference_tokens": (1e9, 1e14),
    "inference_batch": (1, 512),
    "accelerators": (8, 4096),
    "mfu": (0.2, 1),
    "params": (1e6, 1e11),
    "active_params": (1e6, 1e11),
    "tokens": (1e8, 1e13),
    "span": (1.5, 100),
    "max_accelerators": (8, 4096),
    "checkpoint_write_bytes_per_second": (1e10, 1e13),
    "restart_seconds": (1, 3600),
    # Spot capacity: AWS's interruption buckets per 8-GPU instance-hour, per accelerator; a day's wait at most
    "preemptions_per_accelerator_hour": (1e-6, 1e-4),
    "requeue_seconds": (1, 86_400),
}
# Accelerators hold 40 GB at least (as A100s and every later training accelerator), so that a drawn model of
# up to 1e11 parameters, or what a drawn budget buys, has a layout that fits on the clusters drawn (the
# cluster model refuses one that has none).
HARDWARE_MAGNITUDES = {
    "memory_bytes": (4e10, 1e12),
    "memory_bandwidth_bytes_per_second": (1e11, 1e13),
    "accelerators_per_node": (1, 16),
    "scale_up_bandwidth_bytes_per_second": (1e10, 1e12),
    "scale_out_bandwidth_bytes_per_second": (1e9, 1e11),
    "failures_per_accelerator_hour": (1e-7, 1e-4),
}
PEAK_MAGNITUDE = (1e14, 1e16)
LAW_MAGNITUDES = {"E": (1, 3), "A": (100, 500), "B": (100, 500), "alpha": (0.33, 0.5), "beta": (0.33, 0.5)}
SHAPE_MAGNITUDES = {
    "layers": (1, 128),
    "heads": (1, 64),
    "kv_heads": (1, 64),
    "ffn": (64, 65536),
    "vocabulary": (1000, 256_000),
    "sequence_length": (128, 8192),
    "micro_batch": (1, 16),
}

# The cluster model searches layouts; one on fewer accelerators than this may have none that fits a drawn
# model, which it refuses (422 at layout): requests it answers draw clusters at least this large.
FEWEST_ACCELERATORS_MODELLED = 1024
# An estimate's deadline chooses its accelerators; one too short for any cluster is refused (422 at days).
# Ten years is met by the default largest cluster for every model and token count drawn.
DEADLINE_DAYS = 3650
LARGEST_WIDTH = 16384
MOST_HEAD_WIDTH = 256  # the widest attention head of a published model (Gemma's; LLaMA's and GPT-3's are 128)
ASPECT = 32  # the least width per layer of a shape drawn (LLaMA-2 7B and GPT-3 175B: 128)
MOST_ASPECT = 512  # the most (four times the published models' 128)
# Money buys at most ~1e7 accelerator-hours (1e7 at 1 an hour): the model a budget buys then has a layout that
# fits the clusters drawn (the cluster model refuses one with none, 422 at layout).
MONEY_MAGNITUDES = {"cost": (1e3, 1e7), "price_per_hour": (1, 10)}
TARGET_MARGIN = (0.3, 1.5)  # above the law's irreducible loss
WHOLE_NUMBERS = {
    "accelerators",
    "layers",
    "heads",
    "kv_heads",
    "ffn",
    "vocabulary",
    "sequence_length",
    "micro_batch",
    "inference_batch",
    "accelerators_per_node",
    "max_accelerators",
    "global_batch",
}
PUBLISHED_E = {"chinchilla-2022": 1.69, "epoch-2024": 1.82}
LATEST_START = 8000  # a run of these magnitudes ends centuries before 9998


@dataclass(frozen=True)
class World:
    """What exists for requests to name: an organisation with a USD budget, and a plan of it on PROFILE
    whose run measured its throughput (what a calibration fits on)."""

    organization: str
    budget_id: str
    measured_plan_id: str | None = None


# The measured plan: a model the cluster model lays out on one node of PROFILE.
MEASURED_PLAN = {"params": 1e8, "tokens": 2e9, "hardware": PROFILE, "accelerators": 8}


def loaded(document: dict, world: World) -> schemathesis.BaseSchema:
    """The description for schemathesis, with the hooks below (set `schema.app`, or call with a base URL)."""
    schema = schemathesis.openapi.from_dict(copy.deepcopy(document), config=_config())
    extensions = dict(_extensions(document))
    schema.hook("map_case")(lambda context, case: _keep_to_rules(case, world, *extensions[_label(case)]))
    return schema


def _config() -> SchemathesisConfig:
    """schemathesis.toml less what it allows for the rules no schema states (a 422 for a schema-valid
    request): the hooks below keep drawn requests to those rules, so in the suite they must be accepted."""
    config = tomllib.loads(SCHEMATHESIS_TOML.read_text())
    config["operations"] = [entry for entry in config.get("operations", []) if "422" not in accepted(entry)]
    return SchemathesisConfig.from_dict(config)


def accepted(entry: dict) -> list[str]:
    """The statuses an entry of schemathesis.toml accepts for a schema-valid request."""
    return entry.get("checks", {}).get("positive_data_acceptance", {}).get("expected-statuses", [])


def _label(case) -> str:
    return f"{case.method.upper()} {case.path}"


def _extensions(document: dict) -> Iterator[tuple[str, tuple[tuple, tuple]]]:
    """Per operation, the `x-greater-than` pairs (query or body, later, earlier), and the body members with
    `x-propertyNames` (name, pattern of their keys)."""
    schemas = document["components"]["schemas"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            pairs = [
                ("query", parameter["name"], parameter["schema"][order], order == "x-greater-than")
                for parameter in operation.get("parameters", [])
                for order in ("x-greater-than", "x-not-less-than")
                if order in parameter.get("schema", {})
            ]
            keys = []
            for content in operation.get("requestBody", {}).get("content", {}).values():
                reference = content.get("schema", {}).get("$ref", "")
                properties = schemas.get(reference.rsplit("/", 1)[-1], {}).get("properties", {})
                for name, value in properties.items():
                    for order in ("x-greater-than", "x-not-less-than"):
                        if order in value:
                            pairs.append(("body", name, value[order], order == "x-greater-than"))
                    if "x-propertyNames" in value:
                        keys.append((name, value["x-propertyNames"]["pattern"]))
            yield f"{method.upper()} {path}", (tuple(pairs), tuple(keys))


def _members(case, where: str) -> dict | None:
    members = case.query if where == "query" else case.body
    return members if isinstance(members, dict) else None


def _keep_to_rules(case, world: World, pairs, keys):
    if (
        case.headers
        and isinstance(case.headers.get("If-Match"), str)
        and zlib.crc32(case.headers["If-Match"].encode()) % 2
    ):
        # Half of the updates and deletes name whatever version is current, so that they get past their
        # precondition; the others keep the drawn ETag (a 412, or a 400 if it is not one).
        case.headers["If-Match"] = "*"
    if case.headers and "Idempotency-Key" in case.headers:
        # A client sends a new key with each new request; a key sent again with another body is a 422.
        case.headers["Idempotency-Key"] = f"{case.headers['Idempotency-Key'][:200]}-{uuid.uuid4().hex}"
    if _label(case) in PLANNING:
        for where in (case.query, case.body):
            if isinstance(where, dict):
                _real_magnitudes(where)
    for where, later, earlier, strictly in pairs:
        members = _members(case, where)
        if members and members.get(later) is not None and members.get(earlier) is not None:
            _in_order(members, later, earlier, strictly=strictly)
    if _label(case) == "GET /v1/reports/costs" and isinstance(case.query, dict):
        _a_focus_export_as_its_format_says(case.query)
        _a_window_of_periods_a_report_lists(case.query)
    if isinstance(case.body, dict):
        _real_references(case.body, world)
        _peak_at_the_precision(case.body)
        # The shape first: the cluster is sized for the model the shape sent makes (a shape whose heads did
        # not yet divide its width gave no parameters to size by, and the request kept a drawn cluster too
        # small for it).
        _shape_that_divides(case.body)
        _a_cluster_the_model_can_run(case.body)
        _future_expiry(case.body)
        _a_receiver_by_name(case.body)
        _runs_that_make_a_law(case.body)
        _a_catalog_file(case.body)
        _keys_that_match(case.body, keys)
    return case


def _a_focus_export_as_its_format_says(query: dict) -> None:
    """format=focus (its description says) takes no group_by, measure actual only, a day or a month."""
    if query.get("format") != "focus":
        return
    query.pop("group_by", None)
    query["measure"] = "actual"
    if query.get("granularity") == "week":
        query["granularity"] = "day"


def _a_window_of_periods_a_report_lists(query: dict) -> None:
    """A report of actual spend, and any CSV, lists every period of its window, at most 100 000 rows (its
    `granularity` says so): a window of days, weeks or months is cut to 50 years (18 263 days, for a few
    groups each)."""
    every_period = query.get("measure") in ("actual", "both") or query.get("format") == "csv"
    if not every_period or query.get("granularity") in (None, "none"):
        return
    try:
        start, end = datetime.fromisoformat(query["from"]), datetime.fromisoformat(query["to"])
    except (KeyError, TypeError, ValueError):
        return
    if end - start > timedelta(days=18_263):
        query["to"] = (start + timedelta(days=18_263)).isoformat()


def _in_order(members: dict, later: str, earlier: str, *, strictly: bool = True) -> None:
    """`x-greater-than` and `x-not-less-than`: two values drawn the wrong way round are swapped; of a tie
    (`x-greater-than` only: the other admits one), the later is moved on (a second for times, twice as large
    for numbers), or the earlier back where moving on would leave 9998."""
    if isinstance(members[later], str):
        high, low = datetime.fromisoformat(members[later]), datetime.fromisoformat(members[earlier])
        if high < low:
            members[later], members[earlier] = members[earlier], members[later]
        elif not strictly:
            return
        elif high == low and high.year < 9998:
            members[later] = (high + timedelta(seconds=1)).isoformat()
        elif high == low:
            members[earlier] = (low - timedelta(seconds=1)).isoformat()
    elif members[later] < members[earlier]:
        members[later], members[earlier] = members[earlier], members[later]
    elif members[later] == members[earlier] and strictly:
        members[later] = members[later] * 2


PLANNING = {
    "POST /v1/allocations",
    "POST /v1/comparisons",
    "POST /v1/estimates",
    "POST /v1/plans",
    "POST /v1/plans/{plan_id}/revise",
    "GET /v1/scaling-laws/{slug}/isoflop",
    "GET /v1/scaling-laws/{slug}/frontier",
}


def _within(drawn, low: float, high: float) -> float:
    share = zlib.crc32(repr(drawn).encode()) / 0xFFFFFFFF
    return low * (high / low) ** share


def _scaled(members: dict, magnitudes: dict) -> None:
    for name, (low, high) in magnitudes.items():
        value = members.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            scaled = _within(value, low, high)
            members[name] = round(scaled) if name in WHOLE_NUMBERS else scaled
        elif isinstance(value, str) and name in MONEY_MAGNITUDES:
            members[name] = f"{_within(value, low, high):.2f}"


def _real_magnitudes(members: dict) -> None:
    """Planning figures of the magnitudes real plans have (see MAGNITUDES)."""
    curve = dict.fromkeys(("min_flops", "max_flops"), MAGNITUDES["flops"])
    _scaled(members, MAGNITUDES | MONEY_MAGNITUDES | curve)
    for inline in (members.get("hardware"), members.get("inference_hardware")):
        if isinstance(inline, dict):
            _scaled(inline, HARDWARE_MAGNITUDES | MONEY_MAGNITUDES)
            if isinstance(inline.get("peak_flops"), dict):
                _scaled(inline["peak_flops"], dict.fromkeys(inline["peak_flops"], PEAK_MAGNITUDE))
    hardware = members.get("hardware")
    law = members.get("law")
    if isinstance(law, dict):
        _scaled(law, LAW_MAGNITUDES)
    if isinstance(members.get("reliability"), dict):
        _scaled(members["reliability"], MAGNITUDES)
    if isinstance(members.get("shape"), dict):
        _scaled(members["shape"], SHAPE_MAGNITUDES)
        shape = members["shape"]
        if isinstance(shape.get("d_model"), int):
            # A model tens to hundreds of times as wide as it is deep, as real ones are: the proportions of a
            # shape given for a budget to size scale to the model the budget buys. d_model 2 over 12 layers
            # tops out near 1e9 parameters at 1 024 layers, a 422 at shape; 16 384 over 5 layers, sized for
            # 45 days of 1 024 H100s, made layers too large for any layout to fit (a 422 at layout). No
            # schema can state either.
            layers = shape["layers"] if isinstance(shape.get("layers"), int) else 1
            widest = min(LARGEST_WIDTH, MOST_ASPECT * layers)
            shape["d_model"] = max(ASPECT * layers, min(shape["d_model"], widest))
    if isinstance(members.get("target_loss"), int | float):
        named = law if isinstance(law, str) else "epoch-2024"  # the larger E, whichever law the engine takes
        floor = law.get("E") if isinstance(law, dict) else PUBLISHED_E.get(named, PUBLISHED_E["epoch-2024"])
        if isinstance(floor, int | float):
            members["target_loss"] = floor + _within(members["target_loss"], *TARGET_MARGIN)
    fewest = _fewest_training_tokens(members)
    if fewest is not None and isinstance(members.get("inference_tokens"), int | float):
        # A run is planned for at most INFERENCE_PER_TRAINING times the tokens its budget trains on: beyond,
        # the model the budget buys for them shrinks to nothing, a 422 naming the budget ("too small for N
        # inference tokens") that no schema can state.
        members["inference_tokens"] = min(members["inference_tokens"], INFERENCE_PER_TRAINING * fewest)
    start = members.get("start_at")
    if isinstance(start, str) and datetime.fromisoformat(start).year > LATEST_START:
        members["start_at"] = f"{LATEST_START}{start[4:]}"
    needs_price = members.get("cost") is not None and members.get("price_per_hour") is None
    if needs_price and isinstance(hardware, dict) and hardware.get("price_per_hour") is None:
        # A money budget needs a price: the hardware's, or the request's own.
        members["price_per_hour"], members["currency"] = "2.00", members.get("currency") or "USD"


# 10, not more: a budget pays for serving too, and decoding, bound by memory, costs an inference token far
# more than the 2 N FLOPs the cap counts. The least model a shape's proportions scale to then served 5e11
# tokens past an hour of 1 104 H100s (a 422 at the budget, "buys no run ... however small the model").
INFERENCE_PER_TRAINING = 10
# FLOP/s an accelerator-hour buys at the least the drawn clusters give (PEAK_MAGNITUDE's low end at 40% MFU),
# and the most an hour costs (MONEY_MAGNITUDES' price_per_hour).
LEAST_FLOPS_PER_SECOND, MOST_PRICE_PER_HOUR = 0.4 * PEAK_MAGNITUDE[0], MONEY_MAGNITUDES["price_per_hour"][1]
LEAST_PRICE_PER_HOUR = MONEY_MAGNITUDES["price_per_hour"][0]


def _money(value) -> float | None:
    """An amount as requests give one (a decimal string), None for anything else drawn."""
    return float(value) if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?", value) else None


def _fewest_training_tokens(members: dict) -> float | None:
    """The fewest tokens the request's tightest budget trains on, at 20 a parameter (C = 6·N·D), if it has
    one in FLOPs, PF-days, accelerator-hours or money."""
    flops = []
    for name, per_unit in (("flops", 1.0), ("pf_days", PF_DAY_FLOPS), ("accelerator_hours", 3600.0)):
        value = members.get(name)
        if isinstance(value, int | float) and value > 0:
            flops.append(value * per_unit * (LEAST_FLOPS_PER_SECOND if name == "accelerator_hours" else 1.0))
    cost = _money(members.get("cost"))
    if cost is not None and cost > 0:
        flops.append(cost / MOST_PRICE_PER_HOUR * 3600.0 * LEAST_FLOPS_PER_SECOND)
    return math.sqrt(20 * min(flops) / 6) if flops else None


def _pick(options: tuple[str, ...], drawn: str) -> str:
    return options[zlib.crc32(drawn.encode()) % len(options)]


def _real_references(body: dict, world: World) -> None:
    """Names must name what exists ("No organization 'x'" otherwise): the world's, a catalog profile,
    a published law. A request on the catalog profile keeps to what it has: its currency (USD) unless it
    gives its own price, and a precision it has a peak at."""
    if isinstance(body.get("organization"), str):
        body["organization"] = world.organization
    if isinstance(body.get("budget_id"), str):
        body["budget_id"] = world.budget_id
    if isinstance(body.get("law"), str):
        body["law"] = _pick(LAWS, body["law"])
    if isinstance(body.get("plans"), list) and world.measured_plan_id is not None:
        # A calibration fits on the organisation's measured plans on the profile: the world has one.
        body["plans"] = [world.measured_plan_id]
    if isinstance(body.get("allowed_hardware"), list):
        body["allowed_hardware"] = [PROFILE] * min(len(body["allowed_hardware"]), 1)
    if isinstance(body.get("inference_hardware"), str):
        body["inference_hardware"] = PROFILE
    if isinstance(body.get("hardware"), str):
        body["hardware"] = PROFILE
        if body.get("precision") not in (None, *PROFILE_PRECISIONS):
            body["precision"] = "bf16"
    if body.get("currency") is not None and body.get("price_per_hour") is None:
        # Without a price of its own, a request's currency is its hardware's: amounts are never mixed.
        hardware = body.get("hardware")
        priced = isinstance(hardware, dict) and hardware.get("price_per_hour") is not None
        body["currency"] = hardware.get("currency") if priced else "USD"
    if "budget_id" in body:  # a plan charged to the budget costs in its currency (USD), so it needs a price
        if body.get("currency") is not None:
            body["currency"] = "USD"
        hardware = body.get("hardware")
        if isinstance(hardware, dict):
            hardware.update(currency="USD", price_per_hour=hardware.get("price_per_hour") or "2.00")


# A catalog in SkyPilot's format (its description names the columns): one row of an 8-GPU instance.
CATALOG_FILE = "\n".join(
    (
        "InstanceType,AcceleratorName,AcceleratorCount,Price,SpotPrice,Region",
        "p5.48xlarge,H100,8.0,55.04,,us-east-1",
        "",
    )
)


def _a_catalog_file(body: dict) -> None:
    """An import's `catalog` is a CSV file with the columns its description names."""
    if isinstance(body.get("catalog"), str) and "provider" in body:
        body["catalog"] = CATALOG_FILE


def _peak_at_the_precision(body: dict) -> None:
    """Inline hardware has a peak at the run's precision (bf16 unless `precision` says otherwise), one the
    engine trains at (int8 is not)."""
    hardware = body.get("hardware")
    peaks = hardware.get("peak_flops") if isinstance(hardware, dict) else None
    if isinstance(peaks, dict) and body.get("precision", "bf16") not in peaks:
        trainable = [precision for precision in peaks if precision in PROFILE_PRECISIONS]
        if not trainable:
            peaks["bf16"], trainable = 1e15, ["bf16"]
        body["precision"] = trainable[0]


def _shape_that_divides(body: dict) -> None:
    """`heads` divides `d_model` and `kv_heads` divides `heads`; `tensor_parallel` divides the accelerators,
    the heads and the key/value heads (Megatron splits heads across tensor-parallel ranks)."""
    shape = body.get("shape") if isinstance(body.get("shape"), dict) else {}
    _heads_as_narrow_as_real_ones(shape)
    if isinstance(shape.get("heads"), int) and isinstance(shape.get("d_model"), int):
        shape["d_model"] = shape["heads"] * max(1, shape["d_model"] // shape["heads"])
    if isinstance(shape.get("heads"), int) and isinstance(shape.get("kv_heads"), int):
        shape["kv_heads"] = math.gcd(shape["kv_heads"], shape["heads"])
    tensor_parallel = body.get("tensor_parallel")
    if isinstance(tensor_parallel, int):
        # Without accelerators the planner chooses whole nodes (8 accelerators in the catalog's).
        count = body.get("accelerators") if isinstance(body.get("accelerators"), int) else 8
        tensor_parallel = math.gcd(tensor_parallel, count)
        for heads in (shape.get("heads"), shape.get("kv_heads")):
            if isinstance(heads, int):
                tensor_parallel = math.gcd(tensor_parallel, heads)
        body["tensor_parallel"] = tensor_parallel
    _experts_that_fit(body, shape)


def _heads_as_narrow_as_real_ones(shape: dict) -> None:
    """Heads at most MOST_HEAD_WIDTH wide. A budget's model keeps the shape's width per head: 2 heads of 8 192
    (or a `head_dim` of 32 768) made the least model too large for an hour of its cluster, a 422 at the
    budget."""
    if isinstance(shape.get("heads"), int) and isinstance(shape.get("d_model"), int):
        shape["heads"] = max(shape["heads"], -(-shape["d_model"] // MOST_HEAD_WIDTH))
    for name in ("head_dim", "rope_head_dim"):
        if isinstance(shape.get(name), int):
            shape[name] = min(shape[name], MOST_HEAD_WIDTH)


def _experts_that_fit(body: dict, shape: dict) -> None:
    """A drawn mixture of experts is one the cluster model can run: top-k among its experts, widths and
    depths within the model's, and, given without a shape, a total the planner can assume a shape for."""
    if isinstance(shape.get("experts"), int):
        # At most 16 experts, 2 of them (and one shared) a token, each no wider than the model, a little
        # imbalance: a drawn dense shape fits memory once its layers are few enough, but a wide one with
        # many wide experts a token would not fit at any count (its activations, not its weights).
        shape["experts"] = min(shape["experts"], 16)
        if isinstance(shape.get("experts_per_token"), int):
            shape["experts_per_token"] = min(shape["experts_per_token"], 2, shape["experts"])
        for name in ("shared_experts", "moe_every"):
            if isinstance(shape.get(name), int):
                shape[name] = min(shape[name], 1 if name == "shared_experts" else 2)
        if isinstance(shape.get("capacity_factor"), int | float):
            shape["capacity_factor"] = min(shape["capacity_factor"], 1.25, shape["experts"])
        if isinstance(shape.get("d_model"), int):
            shape["expert_ffn"] = min(shape.get("expert_ffn") or shape["d_model"], shape["d_model"])
    for name in ("expert_ffn", "kv_lora_rank", "q_lora_rank", "head_dim", "rope_head_dim"):
        if isinstance(shape.get(name), int) and isinstance(shape.get("d_model"), int):
            shape[name] = min(shape[name], 4 * shape["d_model"])
    if all(isinstance(shape.get(name), int) for name in ("head_dim", "heads", "d_model")):
        # Heads no wider together than 4 times the model: 33 heads of 65 472 made a two-layer model whose
        # attention alone fits no layout (a drawn tensor-parallel degree of 1 kept it whole on each rank).
        shape["head_dim"] = max(1, min(shape["head_dim"], 4 * shape["d_model"] // shape["heads"]))
    if isinstance(shape.get("layers"), int) and isinstance(shape.get("dense_layers"), int):
        shape["dense_layers"] = min(shape["dense_layers"], shape["layers"] - 1)
    if isinstance(body.get("active_params"), int | float) and isinstance(body.get("params"), int | float):
        # A mixture of experts the planner assumes a shape for: at most 50 times as many parameters as a
        # token passes through (DeepSeek-V3 has 18; wall_clock.MOST_EXPERTS bounds the assumption).
        body["params"] = min(body["params"], 50 * body["active_params"])
    if isinstance(shape.get("mtp_depth"), int):
        shape["mtp_depth"] = min(shape["mtp_depth"], 2)


# Layout fields whose values must agree with each other and with the cluster (degrees that multiply to the
# accelerators, a micro-batch and a global batch that divide among the replicas): the description says so in
# words, and the
# cluster model refuses what does not (tests/api/test_cluster_model.py). Drawn ones are left to the search.
LAYOUT_DEGREES = ("tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel")
LAYOUT_SPLITS = (
    *LAYOUT_DEGREES,
    "micro_batch",
    "interleave",
    "global_batch",
    "expert_parallel",
    "expert_overlap",
)


def _a_cluster_the_model_can_run(body: dict) -> None:
    """A cluster the cluster model plans on (no `mfu`) has a layout that fits the drawn model: at least
    FEWEST_ACCELERATORS_MODELLED accelerators in whole nodes, and drawn layout splits left to the search."""
    if not isinstance(body.get("hardware"), str | dict):
        return
    if isinstance(body.get("layout"), dict):
        for name in LAYOUT_SPLITS:
            body["layout"].pop(name, None)
    if body.get("mfu") is None or body.get("accelerators") is None:
        # A fixed ZeRO stage, recomputation or tensor-parallel degree (in layout, or at the top level where
        # they are deprecated) can leave a drawn model no layout that fits: the search chooses them. It
        # searches at a given MFU too when it chooses the accelerators (no ZeRO left 9e9 parameters too
        # large for any count).
        layout = body.get("layout") if isinstance(body.get("layout"), dict) else {}
        for name in ("zero_stage", "recomputation", "tensor_parallel", "flash_attention"):
            layout.pop(name, None)
            body.pop(name, None)
        # A framework bounds the search the same way (fsdp runs neither tensor nor pipeline parallelism).
        body.pop("framework", None)
    chosen = "params" in body or _shape_params(body) is not None  # a model already chosen
    if chosen and isinstance(body.get("days"), int | float) and body.get("accelerators") is None:
        # A deadline the planner can meet: within the accelerators it may choose by default.
        body.pop("max_accelerators", None)
        body["days"] = max(body["days"], DEADLINE_DAYS)
    params = body.get("params")
    if not isinstance(params, int | float):
        params = _shape_params(body)  # an estimate without params takes its shape's
        if params is not None:
            # A drawn shape's activations can outgrow an accelerator per billion parameters: the planner
            # chooses the count within its default.
            body.pop("max_accelerators", None)
    if params is None:
        params = _compute_optimal_params(body)
    # Room for the model: an accelerator per billion parameters (16 GB of mixed-precision Adam states).
    room = 1 if params is None else math.ceil(params / 1e9)
    if body.get("mfu") is None and isinstance(body.get("accelerators"), int):
        # Whole nodes of 8 (a prime count forbids tensor parallelism, which large models need to fit).
        fewest = max(body["accelerators"], room, FEWEST_ACCELERATORS_MODELLED)
        if room > body["accelerators"]:
            _reliable_enough(body)
        body["accelerators"] = -(-fewest // 8) * 8
    if isinstance(body.get("max_accelerators"), int):
        body["max_accelerators"] = max(body["max_accelerators"], room)


def _reliable_enough(body: dict) -> None:
    """A cluster raised to hold a large model (a drawn law may buy tens of trillions of parameters: 60 176
    accelerators in one draw) fails so often at the hardware's failure rate that its checkpoints and restarts
    can leave no time to train, a 422 goodput means. Storage and restarts fast enough for any model the
    magnitudes allow: a checkpoint of 1e15 parameters at 1e16 B/s takes seconds, and the cluster trains."""
    reliability = body.get("reliability") if isinstance(body.get("reliability"), dict) else {}
    body["reliability"] = {**reliability, "checkpoint_write_bytes_per_second": 1e16, "restart_seconds": 0}


def _shape_params(body: dict) -> float | None:
    """The parameters of the model a request without params trains (an estimate's shape's), when it draws
    a shape the core accepts; None for requests whose budget sizes the model (the shape is then scaled)."""
    shape = body.get("shape")
    if "tokens" not in body or not isinstance(shape, dict):
        return None
    try:
        params = ModelShape(**shape).params
    except (InvalidInput, TypeError):
        return None
    return params if params <= MAX_PARAMS else None


def _compute_optimal_params(body: dict) -> float | None:
    """Roughly the most parameters a budget buys, None without a budget: at the ratio asked for or
    Chinchilla's 20 (C = 6 N D with D = r N) twice over, for the published laws that favour larger models,
    or a drawn law's own optimum (Hoffmann et al. 2022, eq. 4), which may favour far larger ones. Hours and
    money buy FLOPs at the hardware's fastest peak, fully used, and money hours at the least price drawn."""
    flops = _most_flops(body)
    if flops is None or flops <= 0:
        return None
    ratio = body.get("tokens_per_param")
    law = body.get("law")
    at_ratio = 2 * math.sqrt(flops / (6 * (ratio if isinstance(ratio, int | float) and ratio > 0 else 20)))
    if ratio is not None or not isinstance(law, dict):
        return at_ratio
    try:
        A, B, alpha, beta = (float(law[name]) for name in ("A", "B", "alpha", "beta"))
        optimum = (alpha * A / (beta * B)) ** (1 / (alpha + beta)) * (flops / 6) ** (beta / (alpha + beta))
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return at_ratio
    return max(at_ratio, optimum)


def _most_flops(body: dict) -> float | None:
    """The most FLOPs the request's budget can buy, if it has one."""
    if isinstance(body.get("flops"), int | float):
        return body["flops"]
    if isinstance(body.get("pf_days"), int | float):
        return body["pf_days"] * PF_DAY_FLOPS
    hours = [body["accelerator_hours"]] if isinstance(body.get("accelerator_hours"), int | float) else []
    cost = _money(body.get("cost"))
    if cost is not None:
        hours.append(cost / LEAST_PRICE_PER_HOUR)
    if not hours:
        return None
    hardware = body.get("hardware")
    peaks = hardware.get("peak_flops") if isinstance(hardware, dict) else None
    numbers = [peak for peak in (peaks or {}).values() if isinstance(peak, int | float)]
    return max(hours) * 3600.0 * (max(numbers) if numbers else PROFILE_FASTEST_PEAK)


def _runs_that_make_a_law(body: dict) -> None:
    """Training runs that can be fitted, and resampled for a bootstrap: a sweep of 6 sizes by 6 token counts
    on Chinchilla's law, giving tokens or flops as the first drawn run does. A name that makes no slug comes
    with a slug. The fuzzer checks the contract, not the fit: a bootstrap answered at once has 10 samples."""
    runs = body.get("runs")
    sweep = [(n, d, _chinchilla(n, d)) for n in SWEEP_PARAMS for d in SWEEP_TOKENS]
    if isinstance(runs, bytes | str):  # a multipart upload: a CSV file
        lines = ["params,tokens,loss", *(f"{n!r},{d!r},{loss!r}" for n, d, loss in sweep)]
        body["runs"] = "\n".join(lines).encode()
    elif isinstance(runs, list) and runs and isinstance(runs[0], dict):
        given = "flops" if "flops" in runs[0] else "tokens"
        body["runs"] = [
            {"params": n, given: 6 * n * d if given == "flops" else d, "loss": loss} for n, d, loss in sweep
        ]
    else:
        return
    if "slug" not in body and len(re.sub(r"[^a-z0-9]", "", str(body.get("name", "")).lower())) < 2:
        body["slug"] = f"fit-{zlib.crc32(str(body.get('name')).encode()):x}"
    samples = body.get("bootstrap", {}).get("samples") if isinstance(body.get("bootstrap"), dict) else None
    if isinstance(samples, int) and samples <= SYNC_BOOTSTRAP_SAMPLES:
        body["bootstrap"]["samples"] = 10


SWEEP_PARAMS = (5e7, 1e8, 2e8, 5e8, 1e9, 2e9)
SWEEP_TOKENS = (1e9, 3e9, 1e10, 3e10, 1e11, 2e11)
SYNC_BOOTSTRAP_SAMPLES = 200  # more are fitted by a job (202), which the in-process fuzzer does not run


def _chinchilla(params: float, tokens: float) -> float:
    return 1.69 + 406.4 / params**0.34 + 410.7 / tokens**0.28


def _keys_that_match(body: dict, properties: tuple[tuple[str, str], ...]) -> None:
    """`x-propertyNames`: a member's keys match its pattern (a drawn key that does not is replaced)."""
    for name, pattern in properties:
        if isinstance(body.get(name), dict):
            body[name] = {_matching(key, pattern): value for key, value in body[name].items()}


def _matching(key: str, pattern: str) -> str:
    if re.fullmatch(pattern, key):
        return key
    replaced = f"k{zlib.crc32(key.encode('utf-8', 'surrogatepass')):x}"
    assert re.fullmatch(pattern, replaced), f"{replaced} does not match {pattern}"
    return replaced


def _a_receiver_by_name(body: dict) -> None:
    """A webhook's URL names its host (its `url` description: an address literal outside public space is
    refused, as the egress policy says, which no pattern can); a drawn address becomes a name."""
    url = body.get("url")  # webhooks' only
    if not isinstance(url, str):
        return
    match = re.match(r"^(https?://)(\[[^\]]*\]|[^/?#:]*)(.*)$", url)
    if match and (match.group(2).startswith("[") or literal_address(match.group(2)) is not None):
        body["url"] = f"{match.group(1)}hooks.example{match.group(3)}"


def _future_expiry(body: dict) -> None:
    """A key's `expires_at` is in the future (or it would never work)."""
    expires_at = body.get("expires_at") if "role" in body else None
    soon = datetime.now(UTC) + timedelta(hours=1)
    if isinstance(expires_at, str) and datetime.fromisoformat(expires_at) <= soon:
        body["expires_at"] = "9998-01-01T00:00:00Z"

"""Hardware profiles: peak FLOP/s by precision, memory, bandwidth, and the price history."""

from __future__ import annotations

import re
from datetime import date

import marshmallow as ma
from marshmallow import validate

from service.core.engine import ASSUMED_NETWORK
from service.core.goodput import DEFAULT_RUN_OVERHEAD, LLAMA3_FAILURES_PER_ACCELERATOR_HOUR, MAX_RUN_OVERHEAD
from service.core.memory import MAX_MEMORY_BYTES
from service.core.performance import EFFICIENCY_RANGE, PROVENANCES, Efficiency
from service.core.units import MAX_PEAK_FLOPS_PER_SECOND
from service.data.catalog import PRECISIONS
from service.schemas.common import ListQuerySchema, PageSchema, StrictSchema, requires
from service.schemas.fields import (
    CurrencyField,
    MoneyField,
    Number,
    Text,
    WholeNumber,
    positive_float,
    slug_field,
)
from service.services.hardware import HardwareFields


class PeakFlopsSchema(StrictSchema):
    """Dense (not 2:4 sparse) peak FLOP/s by precision; at least one."""

    fp32 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "FP32 (non-tensor) peak FLOP/s.")
    tf32 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "TF32 tensor peak FLOP/s.")
    bf16 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "BF16 peak FLOP/s.", metadata={"example": 989.4e12})
    fp16 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "FP16 peak FLOP/s.")
    fp8 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "FP8 peak FLOP/s.")
    int8 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "INT8 peak OP/s.")

    @ma.validates_schema
    def _at_least_one(self, data, **kwargs):
        if not data:
            raise ma.ValidationError("Give the peak at one precision at least.")


def _fraction(description: str, **kwargs) -> Number:
    low, high = EFFICIENCY_RANGE
    return Number(
        validate=validate.Range(low, high),
        metadata={"description": f"{description} In [{low:g}, {high:g}].", **kwargs.pop("metadata", {})},
        **kwargs,
    )


class GemmEfficiencySchema(StrictSchema):
    """Large-GEMM fraction of the dense peak, by training precision."""

    fp32 = _fraction("At the FP32 peak.")
    tf32 = _fraction("At the TF32 peak.")
    bf16 = _fraction("At the BF16 peak.", metadata={"example": 0.598})
    fp16 = _fraction("At the FP16 peak.")
    fp8 = _fraction("At the FP8 peak.")

    @ma.validates_schema
    def _at_least_one(self, data, **kwargs):
        if not data:
            raise ma.ValidationError("Give the efficiency at one precision at least.")


class EfficiencySchema(StrictSchema):
    """What the hardware achieves of its peaks in training, and how that is known. The cluster model reads
    these, never the hardware's name: profiles with the same figures get the same answers."""

    gemm = ma.fields.Nested(
        GemmEfficiencySchema,
        required=True,
        metadata={
            "minProperties": 1,
            "description": "Large-GEMM fraction of the dense peak by precision (cuBLAS reaches 0.6-0.9). A "
            "precision left out runs at the uncalibrated default, with an uncalibrated_hardware warning.",
        },
    )
    attention = _fraction(
        "Fraction of the BF16 peak fused attention kernels (FlashAttention-2, as PyTorch's stacks run it) "
        "reach on the causal half of the scores they compute; default the uncalibrated one."
    )
    attention_transformer_engine = _fraction(
        "What Transformer Engine's fused attention (cuDNN; Megatron-Core, NeMo) reaches, where it differs; "
        "default the attention figure."
    )
    memory = _fraction(
        "Fraction of the memory bandwidth element-wise kernels reach; default the model's fitted one."
    )
    link = _fraction(
        "Fraction of a link's bandwidth collectives reach (NCCL bus bandwidth); default the fitted one."
    )
    provenance = ma.fields.String(
        required=True,
        validate=validate.OneOf(PROVENANCES),
        metadata={
            "description": "calibrated: fitted on measured runs of this hardware (basis names them); "
            "derived: from another part's calibration by a stated argument; uncalibrated: a guess, which "
            "answers warn of (uncalibrated_hardware)."
        },
    )
    basis = Text(
        required=True,
        validate=validate.Length(min=1, max=500),
        metadata={"description": "The runs it was calibrated on, or the argument it was derived by."},
    )


class InlineEfficiencySchema(EfficiencySchema):
    REQUEST = Efficiency


# How hardware is installed in a cluster: a stored profile and inline hardware take the same figures (bytes/s
# whole in a profile, any positive number inline, as their memory bandwidths).
MAX_ACCELERATORS_PER_NODE = 1_000_000
MAX_LINK_BYTES_PER_SECOND = 10**16
# What the planner assumes of hardware that does not give them (core/engine/run.py), and Llama 3's
# interruptions (core/goodput.py).
ASSUMED_ACCELERATORS_PER_NODE, ASSUMED_SCALE_UP_BYTES_PER_SECOND, ASSUMED_SCALE_OUT_BYTES_PER_SECOND = (
    ASSUMED_NETWORK
)


def _assumed(figure: str) -> str:
    return f" Not given (omitted, or null in a profile): the planner assumes {figure}, saying so in a caveat."


ACCELERATORS_PER_NODE = (
    "Accelerators sharing the scale-up domain as installed: 8 in a DGX/HGX node, 72 in an NVL72 rack, the "
    "slice for TPUs." + _assumed(str(ASSUMED_ACCELERATORS_PER_NODE))
)
SCALE_UP = (
    "Scale-up link (NVLink/NVSwitch, ICI, Infinity Fabric; PCIe for cards without one) per accelerator, ONE "
    "direction: 450e9 for NVLink 4 (900 GB/s bidirectional)."
    + _assumed(f"{ASSUMED_SCALE_UP_BYTES_PER_SECOND / 1e9:g} GB/s")
)
SCALE_OUT = (
    "The network between nodes per accelerator, ONE direction: 50e9 for one 400 Gb/s NIC per GPU."
    + _assumed(f"{ASSUMED_SCALE_OUT_BYTES_PER_SECOND / 1e9:g} GB/s")
)
FAILURES = (
    "Unexpected interruptions per accelerator-hour, at least 0 and below 1: Llama 3's pre-training had "
    "1.97e-5 on H100 (Dubey et al. 2024, section 3.3.4)."
    + _assumed(f"{LLAMA3_FAILURES_PER_ACCELERATOR_HOUR:.2e}".replace("e-0", "e-"))
)


RUN_OVERHEAD = (
    "The share of a whole run's wall-clock time lost on this installation beyond failures and checkpoints "
    "(evaluation, loss-spike restarts, slow nodes, data stalls, ramp-up), for every plan on it that states "
    "none of its own; an organisation's calibration fits its own from its runs' actual accelerator-hours. "
    f"Not given: {DEFAULT_RUN_OVERHEAD}, from published whole runs (bench/RESULTS.md)."
)


def run_overhead_field(**kwargs) -> Number:
    return Number(
        validate=validate.Range(0, MAX_RUN_OVERHEAD),
        metadata={"description": RUN_OVERHEAD, "example": 0.15},
        **kwargs,
    )


def accelerators_per_node_field(**kwargs) -> WholeNumber:
    return WholeNumber(
        validate=validate.Range(1, MAX_ACCELERATORS_PER_NODE),
        metadata={"description": ACCELERATORS_PER_NODE, "example": 8},
        **kwargs,
    )


def failures_field(**kwargs) -> Number:
    return Number(
        validate=validate.Range(min=0, max=1, max_inclusive=False),
        # apispec renders max_inclusive=False as an inclusive maximum; say it explicitly (OpenAPI 3.0 form).
        metadata={"description": FAILURES, "exclusiveMaximum": True, "example": 1.97e-5},
        **kwargs,
    )


ISO_DATE_PATTERN = r"^[0-9]{4}(-[0-9]{2}(-[0-9]{2})?)?$"
# What _is_reduced_iso_date admits, as the description states it: a year (not 0000), a month of it, or a date.
_YEAR, _MONTH = "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])", "(0[1-9]|1[0-2])"
REDUCED_ISO_DATE = [
    {"pattern": f"^{_YEAR}$"},
    {"pattern": f"^{_YEAR}-{_MONTH}$"},
    {"pattern": f"^{_YEAR}-", "format": "date"},
]


def _is_reduced_iso_date(text: str) -> None:
    """An ISO 8601 calendar date, possibly of reduced precision (2026, 2026-09, 2026-09-15), that exists."""
    error = ma.ValidationError("Must be an ISO 8601 date that exists: YYYY, YYYY-MM or YYYY-MM-DD.")
    if not re.fullmatch(ISO_DATE_PATTERN, text):
        raise error
    padded = {4: "-01-01", 7: "-01", 10: ""}[len(text)]
    try:
        date.fromisoformat(text + padded)
    except ValueError:
        raise error from None


class HardwareSchema(StrictSchema):
    """A hardware profile. Writes: POST (all required fields), PUT (the whole profile), PATCH (some)."""

    slug = slug_field(required=True, metadata={"example": "our-h100"})
    name = Text(required=True, validate=validate.Length(min=1, max=200))
    vendor = Text(required=True, validate=validate.Length(min=1, max=100), metadata={"example": "NVIDIA"})
    peak_flops = ma.fields.Nested(PeakFlopsSchema, required=True, metadata={"minProperties": 1})
    memory_bytes = WholeNumber(
        required=True,
        validate=validate.Range(1, int(MAX_MEMORY_BYTES)),
        metadata={"example": 80e9},
    )
    memory_bandwidth_bytes_per_second = WholeNumber(
        required=True, validate=validate.Range(1, 10**16), metadata={"example": 3.35e12}
    )
    interconnect_bandwidth_bytes_per_second = WholeNumber(
        allow_none=True,
        validate=validate.Range(1, 10**16),
        metadata={
            "description": "Scale-up link, bidirectional total as vendors quote it "
            "(scale_up_bandwidth_bytes_per_second is one direction)."
        },
    )
    interconnect = Text(allow_none=True, validate=validate.Length(max=100), metadata={"example": "NVLink 4"})
    tdp_watts = WholeNumber(allow_none=True, validate=validate.Range(1, 100_000))
    accelerators_per_node = accelerators_per_node_field(allow_none=True)
    scale_up_bandwidth_bytes_per_second = WholeNumber(
        allow_none=True,
        validate=validate.Range(1, MAX_LINK_BYTES_PER_SECOND),
        metadata={"description": SCALE_UP, "example": 450 * 10**9},
    )
    scale_out_bandwidth_bytes_per_second = WholeNumber(
        allow_none=True,
        validate=validate.Range(1, MAX_LINK_BYTES_PER_SECOND),
        metadata={"description": SCALE_OUT, "example": 50 * 10**9},
    )
    failures_per_accelerator_hour = failures_field(allow_none=True)
    run_overhead = run_overhead_field(allow_none=True)
    efficiency = ma.fields.Nested(
        EfficiencySchema,
        allow_none=True,
        metadata={
            "description": "What it achieves of its peaks and how that is known; null: stated nowhere, run "
            "at the uncalibrated default with an uncalibrated_hardware warning."
        },
    )
    source = Text(
        required=True, validate=validate.Length(min=1, max=500), metadata={"example": "our datasheet"}
    )
    note = Text(allow_none=True, validate=validate.Length(max=1000))
    price_per_hour = MoneyField(
        allow_zero=True,
        allow_none=True,
        metadata={
            "description": "Current price per accelerator-hour; a new value is added to the price history."
        },
    )
    currency = CurrencyField(allow_none=True)
    price_as_of = ma.fields.String(
        allow_none=True,
        validate=_is_reduced_iso_date,
        metadata={
            "description": "When the price was quoted (ISO 8601, year or month precision allowed).",
            "anyOf": REDUCED_ISO_DATE,
        },
    )
    price_source = Text(allow_none=True, validate=validate.Length(max=500))
    price_effective_at = ma.fields.AwareDateTime(dump_only=True, allow_none=True)
    built_in = ma.fields.Boolean(dump_only=True)
    created_at = ma.fields.AwareDateTime(dump_only=True)
    updated_at = ma.fields.AwareDateTime(dump_only=True)

    RULES = (
        requires("price_per_hour", "currency"),
        requires(("currency", "price_as_of", "price_source"), "price_per_hour"),
    )
    REQUEST = HardwareFields


class HardwarePageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(HardwareSchema), required=True)


class HardwareQuerySchema(ListQuerySchema):
    vendor = Text(validate=validate.Length(min=1, max=100), metadata={"description": "e.g. NVIDIA"})
    precision = ma.fields.String(
        validate=validate.OneOf(PRECISIONS), metadata={"description": "Only profiles with a peak at it."}
    )


class HardwarePriceSchema(ma.Schema):
    price_per_hour = MoneyField(dump_only=True)
    currency = ma.fields.String()
    as_of = ma.fields.String(allow_none=True)
    source = ma.fields.String(allow_none=True)
    effective_at = ma.fields.AwareDateTime(
        metadata={"description": "In force from this time until the next."}
    )


class HardwarePricePageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(HardwarePriceSchema), required=True)


# Variants for PUT and PATCH, named for the OpenAPI description (service/api/__init__.py).
HARDWARE_REPLACE = HardwareSchema(exclude=("slug",))
HARDWARE_PATCH = HardwareSchema(exclude=("slug",), partial=True)

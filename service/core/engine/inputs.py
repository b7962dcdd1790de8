"""What the engine is given, resolved: the hardware, the cluster it is used as, the law, the budget."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from service.core import performance
from service.core import validation as v
from service.core.laws import PUBLISHED_LAWS, FittedRange, MoEDesign, ScalingLaw
from service.core.shape import ModelShape

DEFAULT_PRECISION = "bf16"
DEFAULT_OPTIMIZER = "adam"


@dataclass(frozen=True)
class Hardware:
    """An accelerator as the engine needs it: dense peaks per precision, memory, and a price if known."""

    name: str
    peak_flops: Mapping[str, float]
    memory_bytes: float
    slug: str | None = None
    price_per_hour: Decimal | None = None
    currency: str | None = None
    memory_bandwidth_bytes_per_second: float | None = None  # what serving needs (cluster.decoding_runtime)
    # As installed (core/performance.py): None where the profile does not say.
    accelerators_per_node: int | None = None
    scale_up_bandwidth_bytes_per_second: float | None = None
    scale_out_bandwidth_bytes_per_second: float | None = None
    failures_per_accelerator_hour: float | None = None
    # What whole runs on it lose beyond failures and checkpoints (core/goodput.py; None: the default), and
    # who says so when it is not its profile ("hardware"): "calibration", the organisation's from its runs.
    run_overhead: float | None = None
    run_overhead_source: str | None = None
    # What it achieves of its peaks and bandwidths, and how that is known; None: uncalibrated.
    efficiency: performance.Efficiency | None = None

    def calibrated_at(self, precision: str) -> bool:
        """Whether runs (or an argument from them) give its large-GEMM efficiency at `precision`."""
        return self.efficiency is not None and self.efficiency.calibrated_at(precision)

    def matmul_efficiency_at(self, precision: str, calibration: performance.Calibration) -> float:
        """The large-GEMM fraction of the peak the cluster model runs it at: its profile's at `precision`,
        or `calibration`'s default for hardware that states none."""
        stated = None if self.efficiency is None else self.efficiency.gemm.get(precision)
        return calibration.matmul_efficiency if stated is None else stated

    def attention_efficiency_at(
        self, calibration: performance.Calibration, *, transformer_engine: bool = False
    ) -> float | None:
        """The fraction of the BF16 peak fused attention runs at: its profile's (Transformer Engine's where
        the framework uses it and the profile states one), or `calibration`'s default (None in the constants
        of plans from before model 1.4.0)."""
        stated = None if self.efficiency is None else self.efficiency.attention_with(transformer_engine)
        return calibration.attention_efficiency if stated is None else stated


@dataclass(frozen=True)
class Cluster:
    """The hardware a run is planned on, and how it is used. Without `mfu`, the cluster model
    (core/performance.py) predicts the pace from the layout, searching the fields `layout` leaves out; without
    `accelerators`, the planner chooses how many (`max_accelerators`, `deadline_days`)."""

    hardware: Hardware
    accelerators: int | None = None
    mfu: float | None = None
    precision: str = DEFAULT_PRECISION
    optimizer: str = DEFAULT_OPTIMIZER
    framework: str | None = None  # what the layout search stays inside (core/frameworks.py); None: generic
    memory_headroom: float | None = None  # the share of memory a layout leaves free; None: the default
    shape: ModelShape | None = None
    layout: Mapping[str, Any] = field(default_factory=dict)  # the layout fields fixed; the rest are searched
    max_accelerators: int | None = None
    deadline_days: float | None = None  # for choosing the accelerator count of a model already chosen
    # The counts the planner chooses among are multiples of this (an offer's instance: rented together).
    count_multiple: int = 1
    checkpoint_write_bytes_per_second: float | None = None
    restart_seconds: float | None = None
    run_overhead: float | None = None  # what whole runs lose beyond failures and checkpoints; None: default
    # On spot capacity: the provider's preemptions per accelerator-hour and each one's wait for capacity.
    preemptions_per_accelerator_hour: float = 0.0
    requeue_seconds: float = 0.0
    # What a budget in money, hours or days is turned into FLOPs at when the model sets the pace: the
    # allocation's FLOPs per accelerator-second over the peak, found by `plan`.
    utilisation: float | None = None
    calibration: performance.Calibration = performance.CALIBRATION  # a stored plan's, when it replays

    @property
    def headroom(self) -> float:
        """The share of memory a searched layout leaves free: the request's, or the default."""
        return performance.DEFAULT_MEMORY_HEADROOM if self.memory_headroom is None else self.memory_headroom

    # The parameters a token passes through, for a mixture of experts given without its shape: the FLOPs
    # follow them, the memory the total (the cluster model assumes a fine-grained shape of both).
    active_params: float | None = None

    @property
    def peak_flops_per_second(self) -> float:
        peak = self.hardware.peak_flops.get(self.precision)
        if peak is None:
            available = ", ".join(sorted(self.hardware.peak_flops)) or "none"
            raise v.InvalidInput(
                "precision", f"{self.hardware.name} has no {self.precision} peak (available: {available})"
            )
        return peak

    @property
    def data_parallel(self) -> int:
        """Under a given MFU: accelerators over the tensor-parallel degree."""
        t = int(self.layout.get("tensor_parallel", 1))
        count = self.accelerators or 1
        if count % t:
            raise v.InvalidInput("layout.tensor_parallel", f"must divide accelerators ({count}), got {t}")
        return count // t


@dataclass(frozen=True)
class NamedLaw:
    law: ScalingLaw
    slug: str | None = None
    name: str | None = None
    source: str | None = None
    fitted_range: FittedRange | None = None
    note: str | None = None
    samples: tuple[ScalingLaw, ...] = ()  # bootstrap fits of a fitted law: plans with it get intervals
    # Whether the law's N counts the embedding and output layers (PublishedLaw.counts_embeddings). Inline
    # and fitted laws say nothing about it: taken as counting them, as Hoffmann et al. 2022 and the
    # 6·N·D the service budgets with do.
    counts_embeddings: bool = True
    moe: MoEDesign | None = None  # the mixture-of-experts design an MoE law assumes; None for dense laws


def published(slug: str) -> NamedLaw:
    entry = PUBLISHED_LAWS[slug]
    return NamedLaw(
        entry.law,
        entry.slug,
        entry.name,
        entry.source,
        entry.fitted_range,
        entry.note or None,
        counts_embeddings=entry.counts_embeddings,
        moe=entry.moe,
    )


@dataclass(frozen=True)
class Budget:
    """Limits on a run. Compute limits (`flops`, or the money, hours and days a cluster turns into FLOPs)
    can be combined and the tightest binds; `target_loss` asks for the least compute reaching a loss."""

    flops: float | None = None
    pf_days: float | None = None
    target_loss: float | None = None
    cost: Decimal | None = None
    currency: str | None = None
    accelerator_hours: float | None = None
    days: float | None = None
    price_per_hour: Decimal | None = None


def price_of(
    hardware: Hardware, price_per_hour: Decimal | None, currency: str | None
) -> tuple[Decimal | None, str | None]:
    """The price per accelerator-hour a run is costed at: the one given (with its currency), or else the
    hardware's, never in another currency than the one asked for."""
    if price_per_hour is not None:
        if currency is None:
            raise v.InvalidInput("currency", "is required with price_per_hour")
        return price_per_hour, currency
    if hardware.price_per_hour is None:
        return None, None
    if currency is not None and currency != hardware.currency:
        raise v.InvalidInput(
            "currency",
            f"{hardware.name} is priced in {hardware.currency}, not {currency}; amounts in different "
            "currencies are never mixed (give price_per_hour in your currency instead)",
        )
    return hardware.price_per_hour, hardware.currency

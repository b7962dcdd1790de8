"""Serving a plan's inference tokens: decoding on the inference hardware, or the cluster's, and its cost."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from service.core import cluster, units
from service.core import validation as v
from service.core.engine.inputs import Budget, Cluster, Hardware, price_of

# Precisions a server decodes bf16 weights at (shape.SERVING_BYTES_PER_PARAM), in order of preference.
SERVING_PRECISIONS = ("bf16", "fp16")


@dataclass(frozen=True)
class Serving:
    """What serving the plan's inference tokens takes: accelerator-hours, and their cost if priced."""

    hardware: Hardware
    decoding: cluster.Decoding
    price_per_hour: Decimal | None
    currency: str | None
    cost: Decimal | None


def check_serving(
    inference_tokens: float | None, inference_hardware: Hardware | None, inference_batch: int | None
) -> None:
    for name, value in (("inference_hardware", inference_hardware), ("inference_batch", inference_batch)):
        if value is not None and inference_tokens is None:
            raise v.InvalidInput(name, "needs inference_tokens: it says how they are served")
    if inference_hardware is not None and inference_hardware.memory_bandwidth_bytes_per_second is None:
        raise v.InvalidInput(
            "inference_hardware",
            f"{inference_hardware.name} has no memory_bandwidth_bytes_per_second, which decoding is bound by",
        )
    if inference_batch is not None:
        v.whole("inference_batch", inference_batch)


def serving(
    params: float,
    inference_tokens: float,
    *,
    hardware: Hardware | None,
    batch: int | None,
    budget: Budget,
    on: Cluster | None,
) -> Serving | None:
    """Serving the inference tokens on `hardware` at its price, or else on the cluster's hardware at the
    cluster's price (a `price_per_hour` given for the cluster included); None without a memory bandwidth."""
    price_per_hour, currency, argument = None, None, "inference_hardware"
    if hardware is None:
        if on is None:
            return None
        hardware, price_per_hour, currency = on.hardware, budget.price_per_hour, budget.currency
        argument = "hardware"
    bandwidth = hardware.memory_bandwidth_bytes_per_second
    if bandwidth is None:  # the cluster's hardware's (check_serving refused inference_hardware without one)
        return None
    price, price_currency = price_of(hardware, price_per_hour, currency)
    peak = next((hardware.peak_flops[p] for p in SERVING_PRECISIONS if p in hardware.peak_flops), None)
    try:
        decoding = cluster.decoding_runtime(
            params,
            inference_tokens,
            bandwidth,
            batch=1 if batch is None else batch,
            peak_flops_per_second=peak,
        )
    except v.InvalidInput as error:  # figures of the hardware (the rest the plan has checked already)
        raise v.InvalidInput(argument, f"{hardware.name}: {error.message}") from None
    try:
        cost = None if price is None else units.cost_of_accelerator_hours(decoding.accelerator_hours, price)
    except v.InvalidInput as error:
        raise v.InvalidInput("inference_tokens", f"serving them {error.message}") from None
    return Serving(hardware, decoding, price, price_currency, cost)

"""Built-in data shipped with the package: accelerator profiles (`hardware.json`), every figure sourced.

The data file keeps the units vendors quote (TFLOP/s, GB, TB/s, GB/s per direction) so that it can be checked
against the datasheets by eye; this module converts them exactly to the service's units (FLOP/s, bytes,
bytes/s).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")

_TERA = Decimal(10) ** 12
_GIGA = Decimal(10) ** 9


@dataclass(frozen=True)
class PriceSpec:
    price_per_hour: Decimal
    currency: str
    as_of: str
    source: str


@dataclass(frozen=True)
class HardwareSpec:
    slug: str
    name: str
    vendor: str
    peak_flops: dict[str, float]
    memory_bytes: int
    memory_bandwidth_bytes_per_second: int
    interconnect_bandwidth_bytes_per_second: int | None
    interconnect: str | None
    tdp_watts: int | None
    # As installed in a cluster (the reference system the entry names); None: no published figure.
    accelerators_per_node: int | None
    scale_up_bandwidth_bytes_per_second: int | None  # per accelerator, one direction
    scale_out_bandwidth_bytes_per_second: int | None  # per accelerator, one direction
    failures_per_accelerator_hour: float | None
    run_overhead: float | None  # what whole runs on it lose beyond failures and checkpoints; None: default
    efficiency: dict[str, Any]  # core.performance.Efficiency's fields: every built-in profile states it
    source: str
    note: str | None
    price: PriceSpec | None


def _hardware(entry: dict[str, Any]) -> HardwareSpec:
    unknown = set(entry["peak_tflops"]) - set(PRECISIONS)
    if unknown:
        raise ValueError(f"{entry['slug']}: unknown precisions {sorted(unknown)}")
    link = entry["interconnect_gb_per_second_bidirectional"]
    failures = entry["failures_per_accelerator_hour"]
    price = entry["price"]
    return HardwareSpec(
        slug=entry["slug"],
        name=entry["name"],
        vendor=entry["vendor"],
        peak_flops={precision: float(tflops * _TERA) for precision, tflops in entry["peak_tflops"].items()},
        memory_bytes=int(entry["memory_gb"] * _GIGA),
        memory_bandwidth_bytes_per_second=int(entry["memory_bandwidth_tb_per_second"] * _TERA),
        interconnect_bandwidth_bytes_per_second=None if link is None else int(link * _GIGA),
        interconnect=entry["interconnect"],
        tdp_watts=entry["tdp_watts"],
        accelerators_per_node=entry["accelerators_per_node"],
        scale_up_bandwidth_bytes_per_second=_gb_per_second(entry["scale_up_gb_per_second_per_direction"]),
        scale_out_bandwidth_bytes_per_second=_gb_per_second(entry["scale_out_gb_per_second_per_direction"]),
        failures_per_accelerator_hour=None if failures is None else float(failures),
        run_overhead=entry.get("run_overhead"),
        efficiency=_floats(entry["efficiency"]),
        source=entry["source"],
        note=entry.get("note"),
        price=None
        if price is None
        else PriceSpec(Decimal(price["per_hour"]), price["currency"], price["as_of"], price["source"]),
    )


def _floats(document: Any) -> Any:
    """A JSON document read with Decimal numbers, with floats instead (as the database keeps JSON)."""
    if isinstance(document, dict):
        return {key: _floats(value) for key, value in document.items()}
    return float(document) if isinstance(document, Decimal) else document


def _gb_per_second(figure: Decimal | int | None) -> int | None:
    return None if figure is None else int(figure * _GIGA)


@cache
def builtin_hardware() -> tuple[HardwareSpec, ...]:
    text = resources.files(__package__).joinpath("hardware.json").read_text(encoding="utf-8")
    document = json.loads(text, parse_float=Decimal)
    return tuple(_hardware(entry) for entry in document["hardware"])


@cache
def sample_offers() -> tuple[dict[str, Any], ...]:
    """A sample of offers (`offers.json`), each with its source and date: bodies of POST /v1/offers."""
    text = resources.files(__package__).joinpath("offers.json").read_text(encoding="utf-8")
    return tuple(json.loads(text)["offers"])

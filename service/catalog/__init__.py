"""Built-in data shipped with the package: accelerator profiles (`hardware.json`), every figure sourced.

The data file keeps the units vendors quote (TFLOP/s, GB, TB/s) so that it can be checked against the
datasheets by eye; this module converts them exactly to the service's units (FLOP/s, bytes, bytes/s).
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
    source: str
    note: str | None
    price: PriceSpec | None


def _hardware(entry: dict[str, Any]) -> HardwareSpec:
    unknown = set(entry["peak_tflops"]) - set(PRECISIONS)
    if unknown:
        raise ValueError(f"{entry['slug']}: unknown precisions {sorted(unknown)}")
    link = entry["interconnect_gb_per_second_bidirectional"]
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
        source=entry["source"],
        note=entry.get("note"),
        price=None
        if price is None
        else PriceSpec(Decimal(price["per_hour"]), price["currency"], price["as_of"], price["source"]),
    )


@cache
def builtin_hardware() -> tuple[HardwareSpec, ...]:
    text = resources.files(__package__).joinpath("hardware.json").read_text(encoding="utf-8")
    document = json.loads(text, parse_float=Decimal)
    return tuple(_hardware(entry) for entry in document["hardware"])

"""Builders of valid objects; override only what a test is about."""

from __future__ import annotations

from service.models import HardwareProfile


def hardware_profile(**overrides) -> HardwareProfile:
    fields = {
        "slug": "test-gpu",
        "name": "Test GPU",
        "vendor": "Test",
        "peak_flops_bf16": 100e12,
        "memory_bytes": 80 * 10**9,
        "memory_bandwidth_bytes_per_second": 2 * 10**12,
        "source": "test fixture",
        **overrides,
    }
    return HardwareProfile(**fields)

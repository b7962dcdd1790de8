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


def gpu_body(slug: str = "lab-gpu", price: str = "2.50", currency: str = "USD") -> dict:
    """The body of POST /v1/hardware for a custom, priced profile: 1e15 bf16 FLOP/s, 80 GB."""
    return {
        "slug": slug,
        "name": slug.replace("-", " ").title(),
        "vendor": "Lab",
        "peak_flops": {"bf16": 1e15},
        "memory_bytes": 80 * 10**9,
        "memory_bandwidth_bytes_per_second": 2 * 10**12,
        "source": "lab datasheet",
        "price_per_hour": price,
        "currency": currency,
        "price_as_of": "2026-11",
    }


def year_budget_body(organization: str = "acme") -> dict:
    """The body of POST /v1/budgets for 5,000,000.00 USD over 2026."""
    return {
        "organization": organization,
        "name": "FY26 pretraining",
        "amount": "5000000.00",
        "currency": "USD",
        "period_start": "2026-01-01T00:00:00Z",
        "period_end": "2027-01-01T00:00:00Z",
    }

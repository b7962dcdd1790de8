"""Builders of valid objects; override only what a test is about."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from service.data.models import Budget, HardwareProfile, Plan, UsageRecord, utcnow


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


def budget(organization_id, **overrides) -> Budget:
    """A USD budget of 100.00 for a day from now."""
    now = utcnow()
    fields = {
        "organization_id": organization_id,
        "name": "b",
        "amount": Decimal(100),
        "currency": "USD",
        "period_start": now,
        "period_end": now + timedelta(days=1),
        **overrides,
    }
    return Budget(**fields)


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


def usage_record(
    plan: Plan, *, start: datetime, hours: float, tokens_per_second: float | None
) -> UsageRecord:
    """What an orchestrator reports of `plan`'s run over `hours` from `start`: every accelerator busy, the
    throughput measured (None: not reported), the cost at 2.50 USD an accelerator-hour."""
    accelerator_hours = plan.accelerators * hours
    return UsageRecord(
        plan_id=plan.id,
        organization_id=plan.organization_id,
        kind="usage",
        reporter="orchestrator",
        period_start=start,
        period_end=start + timedelta(hours=hours),
        accelerator_hours=accelerator_hours,
        tokens=None if tokens_per_second is None else tokens_per_second * hours * 3600,
        tokens_per_second=tokens_per_second,
        cost=(Decimal("2.50") * Decimal(accelerator_hours)).quantize(Decimal("0.000001")),
        currency="USD",
        cost_source="price",
        actor="test",
    )


def reversal_of(record: UsageRecord) -> UsageRecord:
    """The record that cancels `record`."""
    return UsageRecord(
        plan_id=record.plan_id,
        organization_id=record.organization_id,
        kind="reversal",
        reverses_id=record.id,
        reporter=record.reporter,
        period_start=record.period_start,
        period_end=record.period_end,
        accelerator_hours=-record.accelerator_hours,
        cost=-record.cost,
        currency=record.currency,
        cost_source="reversal",
        actor="test",
    )

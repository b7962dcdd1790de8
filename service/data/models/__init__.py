"""SQLAlchemy 2 typed models, a module per part of the domain; this package's names are their public face.
Schema changes go through Alembic (`migrations/`), never `create_all`."""

from service.data.models.base import (
    MONEY_SCALE,
    NAMING_CONVENTION,
    Base,
    Money,
    UTCDateTime,
    id_by_slug,
    money_literal,
    table_of,
    utcnow,
)
from service.data.models.budgets import (
    CAP_SLACK,
    DEFAULT_ALERT_THRESHOLDS,
    LEDGER_ENTRIES,
    Budget,
    LedgerEntry,
    budget_hardware,
)
from service.data.models.events import Counter, Event, Webhook, WebhookDelivery
from service.data.models.hardware import HARDWARE_FIGURES, Calibration, HardwarePrice, HardwareProfile
from service.data.models.laws import FitJob, FittedLaw
from service.data.models.offers import PRICINGS, Offer, OfferPrice
from service.data.models.organizations import (
    ApiKey,
    AuditEntry,
    IdempotencyRecord,
    Organization,
    RateLimitBucket,
)
from service.data.models.plans import (
    CHARGED_STATUSES,
    PLAN_STATUSES,
    REPORTING_STATUSES,
    USAGE_KINDS,
    Plan,
    PlanStatus,
    UsageDay,
    UsageRecord,
    standing_usage,
)

__all__ = [
    "CAP_SLACK",
    "CHARGED_STATUSES",
    "DEFAULT_ALERT_THRESHOLDS",
    "HARDWARE_FIGURES",
    "LEDGER_ENTRIES",
    "MONEY_SCALE",
    "NAMING_CONVENTION",
    "PLAN_STATUSES",
    "PRICINGS",
    "REPORTING_STATUSES",
    "USAGE_KINDS",
    "ApiKey",
    "AuditEntry",
    "Base",
    "Budget",
    "Calibration",
    "Counter",
    "Event",
    "FitJob",
    "FittedLaw",
    "HardwarePrice",
    "HardwareProfile",
    "IdempotencyRecord",
    "LedgerEntry",
    "Money",
    "Offer",
    "OfferPrice",
    "Organization",
    "Plan",
    "PlanStatus",
    "RateLimitBucket",
    "UTCDateTime",
    "UsageDay",
    "UsageRecord",
    "Webhook",
    "WebhookDelivery",
    "budget_hardware",
    "id_by_slug",
    "money_literal",
    "standing_usage",
    "table_of",
    "utcnow",
]

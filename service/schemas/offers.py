"""Offers: a hardware profile on a provider, in a region, under a pricing model, and the catalog import."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate
from webargs.fields import DelimitedList

from service.data.models import PRICINGS
from service.schemas.common import ListQuerySchema, PageSchema, Rule, StrictSchema, given_when, requires
from service.schemas.fields import (
    CurrencyField,
    JsonBoolean,
    MoneyField,
    Number,
    Text,
    WholeNumber,
    slug_field,
)
from service.schemas.hardware import REDUCED_ISO_DATE, _is_reduced_iso_date
from service.services.offer_catalog import CatalogImport
from service.services.offers import OfferFields

MAX_TERM_DAYS = 3_653  # ten years
MAX_REQUEUE_SECONDS = 30 * 86_400
PRICING = (
    "on_demand: by the hour, no commitment. reserved: a term of `term_days` paid whether used or not (a "
    "reservation, a savings plan, a capacity block). spot: by the hour on capacity the provider takes back "
    "at `preemptions_per_instance_hour`. owned: your own cluster, `price_per_hour` its capital amortised per "
    "accelerator-hour, plus the energy it draws at `price_per_kwh`."
)


def _name(description: str, **kwargs) -> Text:
    return Text(validate=validate.Length(min=1, max=100), metadata={"description": description}, **kwargs)


def _provider() -> ma.fields.String:
    return ma.fields.String(
        required=True,
        validate=validate.Regexp(
            r"^[a-z0-9][a-z0-9_.-]{0,62}$", error="Must be 1-63 of a-z, 0-9, '.', '_', '-'."
        ),
        metadata={
            "description": "Who offers it: a cloud (aws, gcp, azure, lambda...) or `ours`.",
            "example": "aws",
        },
    )


def _preemptions(**kwargs) -> Number:
    return Number(
        validate=validate.Range(min=0, max=1, max_inclusive=False),
        metadata={
            "description": "Spot: instances the provider takes back per instance-hour. AWS's Spot Instance "
            "Advisor gives buckets of monthly interruption frequency (<5%, 5-10%, ...); 5-10% is 7.0e-5 to "
            "1.44e-4 per instance-hour as a memoryless rate (docs/research/energy-and-offers.md, 4.3).",
            "exclusiveMaximum": True,
            "example": 1.07e-4,
        },
        **kwargs,
    )


def _preemptions_source(**kwargs) -> Text:
    return Text(
        validate=validate.Length(min=1, max=500),
        metadata={"description": "Where the preemption rate comes from."},
        **kwargs,
    )


def _quoted_on(**kwargs) -> ma.fields.String:
    return ma.fields.String(
        validate=_is_reduced_iso_date,
        metadata={"description": "When the price was quoted (ISO 8601).", "anyOf": REDUCED_ISO_DATE},
        **kwargs,
    )


class _OfferTermsSchema(StrictSchema):
    """What PATCH may change of an offer (its hardware and pricing make it the offer it is)."""

    provider = _provider()
    region = _name("The provider's region name; null for a site without one.", allow_none=True)
    availability_zone = _name("A spot price's zone.", allow_none=True)
    instance_type = _name("The instance (or node) it comes in.", allow_none=True)
    accelerators_per_instance = WholeNumber(
        validate=validate.Range(1, 1_000_000),
        metadata={
            "description": "Accelerators an instance has; default 1. A preemption takes them all, and a "
            "comparison sizes the offer in whole instances."
        },
    )
    term_days = WholeNumber(
        allow_none=True,
        validate=validate.Range(1, MAX_TERM_DAYS),
        metadata={"description": "Reserved: the term paid for whether used or not.", "example": 365},
    )
    preemptions_per_instance_hour = _preemptions(allow_none=True)
    preemptions_source = _preemptions_source(allow_none=True)
    requeue_seconds = Number(
        allow_none=True,
        validate=validate.Range(0, MAX_REQUEUE_SECONDS),
        metadata={"description": "Spot: how long a preempted job waits for capacity; default 1 800."},
    )
    pue = Number(
        allow_none=True,
        validate=validate.Range(1, 3),
        metadata={
            "description": "The site's power usage effectiveness; default the provider kind's.",
            "example": 1.1,
        },
    )
    grid_region = _name(
        "The region its grid's carbon intensity is looked up by (GET /v1/grid-intensities); default "
        "`provider:region`.",
        allow_none=True,
    )
    source = Text(
        required=True, validate=validate.Length(min=1, max=500), metadata={"example": "aws price list"}
    )
    note = Text(allow_none=True, validate=validate.Length(max=1000))
    price_per_hour = MoneyField(
        required=True,
        allow_zero=True,
        metadata={
            "description": "Per accelerator-hour (an instance's price over its accelerators); an owned "
            "offer's amortised capital. A new value joins the price history."
        },
    )
    price_per_kwh = MoneyField(
        allow_none=True,
        allow_zero=True,
        metadata={"description": "Owned: the energy's price per kWh, at the meter (PUE included)."},
    )
    currency = CurrencyField(required=True)
    price_as_of = _quoted_on(allow_none=True)
    price_source = Text(allow_none=True, validate=validate.Length(max=500))
    price_effective_at = ma.fields.AwareDateTime(dump_only=True, allow_none=True)
    created_at = ma.fields.AwareDateTime(dump_only=True)
    updated_at = ma.fields.AwareDateTime(dump_only=True)

    RULES: tuple[Rule, ...] = (
        requires(("currency", "price_per_kwh", "price_as_of", "price_source"), "price_per_hour"),
    )
    REQUEST = OfferFields


class OfferSchema(_OfferTermsSchema):
    """An offer. POST takes all its fields; PATCH its terms and price (not its slug, hardware or pricing)."""

    slug = slug_field(required=True, metadata={"example": "aws-p5-48xlarge-us-east-1"})
    hardware_slug = slug_field(
        required=True,
        data_key="hardware",
        metadata={"description": "The hardware profile's slug.", "example": "h100-sxm"},
    )
    pricing = ma.fields.String(
        required=True,
        validate=validate.OneOf(PRICINGS),
        metadata={"description": PRICING, "example": "on_demand"},
    )

    RULES = (
        *_OfferTermsSchema.RULES,
        given_when("term_days", "pricing", "reserved"),
        given_when("preemptions_per_instance_hour", "pricing", "spot"),
        given_when("preemptions_source", "pricing", "spot"),
        given_when("requeue_seconds", "pricing", "spot", required=False),
        given_when("price_per_kwh", "pricing", "owned"),
    )


class OfferPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(OfferSchema), required=True)


# A name in a comma-separated filter: no comma, no control character.
FILTER_NAME = r"^[^,\x00-\x1f\x7f]{1,100}$"


def _names(description: str, item: ma.fields.Field | None = None) -> DelimitedList:
    name = ma.fields.String(
        validate=validate.Regexp(FILTER_NAME, error="Must be 1-100 characters, no comma.")
    )
    return DelimitedList(
        item or name,
        validate=validate.Length(min=1, max=100),
        metadata={"description": description + " Comma-separated for several.", "minItems": 1},
    )


class OfferQuerySchema(ListQuerySchema):
    hardware = _names("Only offers of these hardware profiles.", slug_field())
    provider = _names("Only these providers.")
    region = _names("Only these regions.")
    pricing = _names("Only these pricings.", ma.fields.String(validate=validate.OneOf(PRICINGS)))


class OfferPriceSchema(ma.Schema):
    price_per_hour = MoneyField(dump_only=True)
    price_per_kwh = MoneyField(dump_only=True, allow_none=True)
    currency = ma.fields.String()
    as_of = ma.fields.String(allow_none=True)
    source = ma.fields.String(allow_none=True)
    effective_at = ma.fields.AwareDateTime(
        metadata={"description": "In force from this time until the next."}
    )


class OfferPricePageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(OfferPriceSchema), required=True)


OFFER_PATCH = _OfferTermsSchema(partial=True)


def _no_nul(text: str) -> None:
    # A text column cannot hold NUL (PostgreSQL refuses it): a file with one is not a catalog.
    if "\x00" in text:
        raise ma.ValidationError("Must not contain NUL characters.")


ACCELERATOR_NAME = r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}$"  # SkyPilot's: "A100-80GB", "Gaudi HL-205"


def _at_most_100(mapping: dict) -> None:
    # A function, not validate.Length, which apispec would describe as a string's maxLength.
    if len(mapping) > 100:
        raise ma.ValidationError("At most 100 names.")


class OfferImportSchema(StrictSchema):
    """A catalog file in SkyPilot's `vms.csv` format, and what the file does not say."""

    catalog = ma.fields.String(
        required=True,
        validate=[validate.Length(min=1), _no_nul],
        metadata={
            "description": "CSV text with SkyPilot's vms.csv header (InstanceType, AcceleratorName, "
            "AcceleratorCount, Price, SpotPrice, Region, AvailabilityZone; other columns are ignored)."
        },
    )
    provider = _provider()
    currency = CurrencyField(load_default="USD")  # of the file's prices; SkyPilot's are in USD
    source = Text(
        required=True,
        validate=validate.Length(min=1, max=500),
        metadata={"example": "skypilot-catalog catalogs/v8/aws/vms.csv @00148f2"},
    )
    price_as_of = _quoted_on()
    spot_preemptions_per_instance_hour = _preemptions()
    spot_preemptions_source = _preemptions_source()
    accelerators = ma.fields.Dict(
        keys=ma.fields.String(validate=validate.Regexp(ACCELERATOR_NAME, error="Must be a catalog's name.")),
        values=slug_field(),
        validate=_at_most_100,
        metadata={
            "description": "Accelerator names of the file mapped to hardware profiles, over the built-in "
            'mapping (e.g. {"H100-NVL": "h100-pcie"}). At most 100.',
            "maxProperties": 100,
            # OpenAPI 3.0 has no propertyNames (JSON Schema 2020-12 does): the keys' rule as an extension.
            "x-propertyNames": {"pattern": ACCELERATOR_NAME},
        },
    )
    dry_run = JsonBoolean(
        load_default=False, metadata={"description": "Report what would change; store nothing."}
    )

    RULES = (
        requires("spot_preemptions_source", "spot_preemptions_per_instance_hour"),
        requires("spot_preemptions_per_instance_hour", "spot_preemptions_source"),
    )
    REQUEST = CatalogImport


class RefusedRowSchema(ma.Schema):
    line = ma.fields.Integer(metadata={"description": "In the file, the header being line 1."})
    instance_type = ma.fields.String(allow_none=True)
    accelerator = ma.fields.String(allow_none=True)
    region = ma.fields.String(allow_none=True)
    availability_zone = ma.fields.String(allow_none=True)
    reason = ma.fields.String()


class ImportReportSchema(ma.Schema):
    dry_run = ma.fields.Boolean()
    rows = ma.fields.Integer(metadata={"description": "Rows read, the header not counted."})
    created = ma.fields.List(ma.fields.String(), metadata={"description": "Slugs of the offers added."})
    updated = ma.fields.List(
        ma.fields.String(),
        metadata={"description": "Slugs of the offers whose new price joined their history."},
    )
    unchanged = ma.fields.Integer()
    without_accelerator = ma.fields.Integer(metadata={"description": "CPU rows, not offers of accelerators."})
    refused = ma.fields.List(
        ma.fields.Nested(RefusedRowSchema), metadata={"description": "The first 10 000."}
    )
    refused_count = ma.fields.Integer()

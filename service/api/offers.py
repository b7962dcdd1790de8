"""Offers: hardware profiles on a provider, in a region, under a pricing model, with their price history; and
the import of a public catalog file."""

from __future__ import annotations

import flask
import marshmallow as ma

from service.api.base import (
    ETAG_HEADER,
    LINK_HEADER,
    LOCATION_HEADER,
    Blueprint,
    conditional_read,
    conditional_write,
    etag_header,
    if_match,
    page_response,
)
from service.infra.db import get_session
from service.schemas.common import ListQuerySchema, rules_json
from service.schemas.fields import numeral
from service.schemas.offers import (
    OFFER_PATCH,
    ImportReportSchema,
    OfferImportSchema,
    OfferPageSchema,
    OfferPricePageSchema,
    OfferQuerySchema,
    OfferSchema,
)
from service.services import offer_catalog, offers
from service.web.auth import READERS, requires

blp = Blueprint(
    "offers", __name__, url_prefix="/v1/offers", description="Where hardware can be had, at what price"
)

IMPORT_FORM_FIELDS = tuple(
    name for name in OfferImportSchema().fields if name not in ("catalog", "accelerators")
)
IMPORT_REQUEST_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": "OfferImport"},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["catalog", "provider", "source"],
                **rules_json(OfferImportSchema.RULES),
                "properties": {
                    # Text, not `format: binary`: the part is read as UTF-8 text.
                    "catalog": {
                        "type": "string",
                        "description": "The vms.csv file: a file part (`-F catalog=@vms.csv`) or a field.",
                    },
                    **{
                        name: {"$ref": f"#/components/schemas/OfferImport/properties/{name}"}
                        for name in IMPORT_FORM_FIELDS
                    },
                },
            },
            "encoding": {"catalog": {"contentType": "text/csv"}},
        },
    },
}


@blp.get("", operation_id="listOffers")
@requires(*READERS)
@blp.arguments(OfferQuerySchema, location="query", as_kwargs=True)
@blp.response(200, OfferPageSchema, headers=LINK_HEADER)
def list_offers(limit, cursor, **filters):
    """Offers, newest first; filter by `hardware`, `provider`, `region` or `pricing` (comma-separated)."""
    chosen = offers.OfferFilter(**{name: tuple(values) for name, values in filters.items() if values})
    return page_response(offers.list_offers(get_session(), chosen, limit=limit, after=cursor), limit)


@blp.post("", operation_id="createOffer")
@requires()
@blp.arguments(OfferSchema)
@blp.response(201, OfferSchema, headers={**LOCATION_HEADER, **ETAG_HEADER})
@blp.alt_response(409, response="CONFLICT")
def create_offer(body):
    """Add an offer with its price: on demand, reserved (`term_days`), spot (`preemptions_per_instance_hour`
    and its source) or owned (`price_per_kwh` beside the amortised `price_per_hour`)."""
    offer = offers.create_offer(get_session(), body)
    return offer, {"Location": f"/v1/offers/{offer.slug}", **etag_header(offer)}


@blp.post("/import", operation_id="importOffers")
@requires()
@blp.doc(requestBody=IMPORT_REQUEST_BODY)
@blp.response(200, ImportReportSchema)
@blp.alt_response(413, response="REQUEST_ENTITY_TOO_LARGE")
def import_offers():
    """Import a catalog file in SkyPilot's `vms.csv` format (skypilot-org/skypilot-catalog, catalogs/v8).

    Each row whose accelerator maps to a hardware profile gives an on-demand offer per instance type and
    region, and a spot offer per zone where the zone has spot capacity and a
    `spot_preemptions_per_instance_hour` is given (no public catalog states one). Prices are per
    instance-hour in the file and per accelerator-hour in offers. Offers already there get a new price when
    it changed. Rows that cannot be mapped are listed in `refused` with the reason; CPU rows are counted.
    All of it is stored, or with `dry_run` none of it.
    """
    request = OfferImportSchema().load(_import_body())
    return offer_catalog.import_catalog(get_session(), request)


def _import_body() -> dict:
    request = flask.request
    if request.mimetype != "multipart/form-data":
        return request.get_json()
    form = request.form
    unknown = sorted(
        str(name)
        for name in (set(form) - {"catalog", *IMPORT_FORM_FIELDS}) | (set(request.files) - {"catalog"})
    )
    if unknown:
        raise ma.ValidationError({name: ["Unknown field."] for name in unknown})
    body: dict = {name: form[name] for name in IMPORT_FORM_FIELDS if name in form}
    # A form's fields are text: the numbers and the flag are read as JSON would give them.
    if "spot_preemptions_per_instance_hour" in body:
        body["spot_preemptions_per_instance_hour"] = numeral(body["spot_preemptions_per_instance_hour"])
    if "dry_run" in body:
        body["dry_run"] = {"true": True, "false": False}.get(body["dry_run"], body["dry_run"])
    upload = request.files.get("catalog")
    if upload is not None:
        try:
            body["catalog"] = upload.stream.read().decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise ma.ValidationError({"catalog": [f"Not UTF-8 text: {error}."]}) from None
    elif "catalog" in form:
        body["catalog"] = form["catalog"]
    return body


@blp.get("/<slug:slug>", operation_id="getOffer")
@requires(*READERS)
@blp.response(200, OfferSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_read(blp)
def get_offer(slug):
    """One offer with its current price. Send If-None-Match to get 304 when unchanged."""
    offer = offers.get_offer(get_session(), slug)
    return offer, etag_header(offer)


@blp.patch("/<slug:slug>", operation_id="updateOffer")
@requires()
@blp.arguments(OFFER_PATCH)
@blp.response(200, OfferSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_write(blp)
def update_offer(body, slug):
    """Change an offer's terms or price (a new price joins the history). Its hardware and pricing make it the
    offer it is: another is a new offer."""
    offer = offers.update_offer(get_session(), slug, body, if_match=if_match())
    return offer, etag_header(offer)


@blp.delete("/<slug:slug>", operation_id="deleteOffer")
@requires()
@blp.response(204)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_write(blp)
def delete_offer(slug):
    """Delete an offer and its price history (plans made on it keep their own copy of its terms)."""
    offers.delete_offer(get_session(), slug, if_match=if_match())


@blp.get("/<slug:slug>/prices", operation_id="listOfferPrices")
@requires(*READERS)
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, OfferPricePageSchema, headers=LINK_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
def list_prices(limit, cursor, slug):
    """The price history, newest first: each price is in force from `effective_at` until the next."""
    return page_response(offers.list_prices(get_session(), slug, limit=limit, after=cursor), limit)

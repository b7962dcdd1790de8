"""Hardware profiles: the built-in catalog and custom profiles, with their price history."""

from __future__ import annotations

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
from service.schemas.common import ListQuerySchema
from service.schemas.hardware import (
    HARDWARE_PATCH,
    HARDWARE_REPLACE,
    HardwarePageSchema,
    HardwarePricePageSchema,
    HardwareQuerySchema,
    HardwareSchema,
)
from service.services import hardware
from service.web.auth import READERS, requires

blp = Blueprint(
    "hardware", __name__, url_prefix="/v1/hardware", description="Accelerator profiles and prices"
)


@blp.get("", operation_id="listHardware")
@requires(*READERS)
@blp.arguments(HardwareQuerySchema, location="query", as_kwargs=True)
@blp.response(200, HardwarePageSchema, headers=LINK_HEADER)
def list_hardware(limit, cursor, vendor=None, precision=None):
    """Hardware profiles, newest first; filter by `vendor` or by a `precision` they have a peak at."""
    page = hardware.list_hardware(
        get_session(), vendor=vendor, precision=precision, limit=limit, after=cursor
    )
    return page_response(page, limit)


@blp.post("", operation_id="createHardware")
@requires()
@blp.arguments(HardwareSchema)
@blp.response(201, HardwareSchema, headers={**LOCATION_HEADER, **ETAG_HEADER})
@blp.alt_response(409, response="CONFLICT")
def create_hardware(body):
    """Add a custom hardware profile (with its price, if it has one)."""
    profile = hardware.create_hardware(get_session(), body)
    return profile, {"Location": f"/v1/hardware/{profile.slug}", **etag_header(profile)}


@blp.get("/<slug:slug>", operation_id="getHardware")
@requires(*READERS)
@blp.response(200, HardwareSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@conditional_read(blp)
def get_hardware(slug):
    """One hardware profile with its current price. Send If-None-Match to get 304 when unchanged."""
    profile = hardware.get_hardware(get_session(), slug)
    return profile, etag_header(profile)


@blp.put("/<slug:slug>", operation_id="replaceHardware")
@requires()
@blp.arguments(HARDWARE_REPLACE)
@blp.response(200, HardwareSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
@conditional_write(blp)
def replace_hardware(body, slug):
    """Replace a custom profile. A new price joins the price history; omitting it keeps the current one."""
    profile = hardware.update_hardware(get_session(), slug, body, if_match=if_match(), replace=True)
    return profile, etag_header(profile)


@blp.patch("/<slug:slug>", operation_id="updateHardware")
@requires()
@blp.arguments(HARDWARE_PATCH)
@blp.response(200, HardwareSchema, headers=ETAG_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
@conditional_write(blp)
def update_hardware(body, slug):
    """Change some fields of a custom profile (a new price joins the price history)."""
    profile = hardware.update_hardware(get_session(), slug, body, if_match=if_match(), replace=False)
    return profile, etag_header(profile)


@blp.delete("/<slug:slug>", operation_id="deleteHardware")
@requires()
@blp.response(204)
@blp.alt_response(404, response="NOT_FOUND")
@blp.alt_response(409, response="CONFLICT")
@conditional_write(blp)
def delete_hardware(slug):
    """Delete a custom profile that no budget (or plan) uses."""
    hardware.delete_hardware(get_session(), slug, if_match=if_match())


@blp.get("/<slug:slug>/prices", operation_id="listHardwarePrices")
@requires(*READERS)
@blp.arguments(ListQuerySchema, location="query", as_kwargs=True)
@blp.response(200, HardwarePricePageSchema, headers=LINK_HEADER)
@blp.alt_response(404, response="NOT_FOUND")
def list_prices(limit, cursor, slug):
    """The price history, newest first: each price is in force from `effective_at` until the next."""
    page = hardware.list_prices(get_session(), slug, limit=limit, after=cursor)
    return page_response(page, limit)

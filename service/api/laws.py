"""Scaling laws: the published coefficient sets and the curves they imply."""

from __future__ import annotations

from service.api.base import Blueprint
from service.auth import READERS, requires
from service.schemas import (
    FrontierQuerySchema,
    FrontierSchema,
    IsoflopQuerySchema,
    IsoflopSchema,
    LawPageSchema,
    LawSchema,
)
from service.services import planning

blp = Blueprint("scaling-laws", __name__, url_prefix="/v1/scaling-laws", description="Scaling laws")


@blp.get("")
@requires(*READERS)
@blp.response(200, LawPageSchema)
def list_laws():
    """All scaling laws: coefficients, source and the range each was fitted on."""
    return {"items": planning.list_laws(), "next_cursor": None}


@blp.get("/<slug:slug>")
@requires(*READERS)
@blp.response(200, LawSchema)
@blp.alt_response(404, response="NOT_FOUND")
def get_law(slug):
    """One scaling law."""
    return planning.get_published_law(slug)


@blp.get("/<slug:slug>/isoflop")
@requires(*READERS)
@blp.arguments(IsoflopQuerySchema, location="query", as_kwargs=True)
@blp.response(200, IsoflopSchema)
@blp.alt_response(404, response="NOT_FOUND")
def isoflop(slug, flops, points, span):
    """Loss against model size at a fixed budget (an IsoFLOP profile), for charts."""
    return planning.isoflop(slug, flops, points, span)


@blp.get("/<slug:slug>/frontier")
@requires(*READERS)
@blp.arguments(FrontierQuerySchema, location="query", as_kwargs=True)
@blp.response(200, FrontierSchema)
@blp.alt_response(404, response="NOT_FOUND")
def frontier(slug, min_flops, max_flops, points):
    """The compute-optimal model size, tokens and loss over a range of budgets, for charts."""
    return planning.frontier(slug, min_flops, max_flops, points)

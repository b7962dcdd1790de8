"""Comparisons: one run priced on many offers. Nothing is stored."""

from __future__ import annotations

from service.api.base import Blueprint
from service.infra.db import get_session, only_reads
from service.schemas.comparisons import OfferComparisonRequestSchema, OfferComparisonSchema
from service.services import comparisons
from service.web.auth import READERS, requires, scope

blp = Blueprint(
    "comparisons", __name__, url_prefix="/v1/comparisons", description="Compare offers for one run"
)


@blp.post("", operation_id="createComparison")
@requires(*READERS)
@blp.arguments(OfferComparisonRequestSchema)
@blp.response(200, OfferComparisonSchema)
@only_reads
def create_comparison(request):
    """Price one run on many offers: the cheapest way to train it by a date, or the fastest for the money.

    The run is a model already chosen (`params` and `tokens`; with `days`, the fewest accelerators that
    finish by then on each offer; with `cost` and no `days`, the most that keep within the money), or a
    budget (`cost`, `days`, `flops`) that `law` (or `tokens_per_param`) allocates on each offer. Each offer
    is sized, costed under its pricing (a spot offer's preemptions in its goodput, a reservation's whole
    term, an owned cluster's energy), with its layout, interval, energy and emissions; the answer ranks them
    by `rank_by` and names the frontier of days against cost. Offers that cannot take the run (another
    currency, no layout that fits, over the money) are listed in `unable` with the reason.

    The offers are every offer, or those the filters name (at most 50); a `law` that names none, or more
    than 50 offers, is a 422 naming the field.
    """
    result = comparisons.compare_offers(get_session(), request, scope=scope())
    return comparisons.comparison_document(result)

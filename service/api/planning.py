"""Stateless planning: allocate a budget, estimate a run. Nothing is stored."""

from __future__ import annotations

from service.api.base import Blueprint
from service.infra.db import get_session, only_reads
from service.schemas.planning import (
    AllocationRequestSchema,
    AllocationSchema,
    EstimateRequestSchema,
    EstimateSchema,
)
from service.services import planning
from service.web.auth import READERS, requires, scope

blp = Blueprint("planning", __name__, url_prefix="/v1", description="Allocate compute budgets, estimate runs")


@blp.post("/allocations", operation_id="createAllocation")
@requires(*READERS)
@blp.arguments(AllocationRequestSchema)
@blp.response(200, AllocationSchema)
@only_reads
def create_allocation(request):
    """Allocate a compute budget to a model size and a token count.

    The budget is one of `flops`, `pf_days` or `target_loss`, or any of `cost`, `accelerator_hours` and
    `days` on a `hardware` cluster (the tightest limit binds; `flops`/`pf_days` may join them). The rule is
    `tokens_per_param` (default 20) or a `law`; `unique_tokens` makes it data-constrained and
    `inference_tokens` inference-aware (the least lifetime FLOPs at the target loss, or at the loss the budget
    reaches), with what serving its tokens takes on `inference_hardware` (or `hardware`).

    Which fields go together is in the request's schema. What no schema can say is a 422 naming the field
    too: a `hardware` or `law` slug that names none, a precision the hardware has no peak at, a `currency`
    other than the hardware's price's without a `price_per_hour`, a `target_loss` the law cannot reach, and
    figures beyond what the engine answers for (1e35 FLOPs, 1e16 parameters, 1e18 tokens, a cost of 1e12).
    """
    return planning.make_allocation(get_session(), request, scope=scope())


@blp.post("/estimates", operation_id="createEstimate")
@requires(*READERS)
@blp.arguments(EstimateRequestSchema)
@blp.response(200, EstimateSchema)
@only_reads
def create_estimate(request):
    """Time, accelerator-hours, cost and memory of training `params` on `tokens` on a cluster.

    As for allocations, what no schema can say is a 422 naming the field: a slug that names nothing, a
    precision the hardware has no peak at, a `tensor_parallel` that does not divide the accelerators (and the
    shape's heads), figures beyond what the engine answers for (1e35 FLOPs with the attention term, a cost
    of 1e12).
    """
    return planning.make_estimate(get_session(), request, scope=scope())

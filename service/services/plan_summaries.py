"""A plan as lists show it (GET /v1/plans, the console's history): its summary, kept with its row.

Rendering the 100 summaries of a page from their rows on every read (30 columns converted by the driver and
by SQLAlchemy, then formatted again) was over half of what GET /v1/plans?limit=100 cost (issue 24). So a
plan's row keeps its summary as the JSON a page serves (`Plan.summary`), written in the transaction that
writes the row, with the version of the row it was written for (`Plan.summary_version`). A page serves a
stored summary only while that is the row's version. Any other row is rendered from its columns as the page
is read: one written before migration 0010, or one changed by a writer that bumped its version (as every
writer must: the version is the plan's ETag) without writing its summary. A summary served is never stale;
at worst it is rendered.

What a summary holds is PlanSummarySchema's (tests/api/test_plan_summaries.py holds the two to the same
bytes). A change to it must come with a migration that clears the stored summaries (`summary` to NULL);
`flask --app service plans summarize` (write_behind) then writes them anew, as it does for older plans.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, bindparam, case, event, or_, select, update
from sqlalchemy.orm import Session, SessionTransaction

from service.core.forecast import Progress
from service.data.models import HardwareProfile, Organization, Plan, table_of
from service.infra import json_provider
from service.services.documents import format_money

PLANS = table_of(Plan)
_PLANS = PLANS.c
# Joined on aliases: a plain `organizations` in the FROM would correlate the organisation filter's subquery
# (models.id_by_slug) with each row rather than let the database evaluate it once.
_ORGANIZATION = table_of(Organization).alias("plan_organization")
_HARDWARE = table_of(HardwareProfile).alias("plan_hardware")
# What a summary shows: the columns of PlanSummarySchema, in its order (plan_summary unpacks them so), with
# the organisation's and the hardware's slugs joined in. Columns of the tables, not entities: loading 100
# Plans with their organisation and hardware took most of a page's time in the ORM (issue 24).
COLUMNS = select(
    _PLANS.id,
    _ORGANIZATION.c.slug.label("organization_slug"),
    _PLANS.budget_id,
    _PLANS.parent_id,
    _PLANS.name,
    _PLANS.labels,
    _PLANS.status,
    _HARDWARE.c.slug.label("hardware_slug"),
    _PLANS.method,
    _PLANS.params,
    _PLANS.tokens,
    _PLANS.flops,
    _PLANS.predicted_loss,
    _PLANS.accelerators,
    _PLANS.days,
    _PLANS.accelerator_hours,
    _PLANS.cost,
    _PLANS.currency,
    _PLANS.start_at,
    _PLANS.end_at,
    _PLANS.created_by,
    _PLANS.created_at,
    _PLANS.committed_at,
    _PLANS.cancelled_at,
    _PLANS.started_at,
    _PLANS.finished_at,
    _PLANS.actual_accelerator_hours,
    _PLANS.actual_cost,
    _PLANS.tokens_trained,
).select_from(
    PLANS.join(_ORGANIZATION, _ORGANIZATION.c.id == _PLANS.organization_id).outerjoin(
        _HARDWARE, _HARDWARE.c.id == _PLANS.hardware_id
    )
)
# The same values of a Plan, by these names (organization_slug and hardware_slug are its properties).
_NAMES = tuple(column.name for column in COLUMNS.selected_columns)

# What a page reads of a plan: the keyset's columns and its summary where it is the row's (else NULL). The
# plans table alone, where the rows of COLUMNS cost a page most of its time.
LISTED = select(
    _PLANS.id,
    _PLANS.created_at,
    case((_PLANS.summary_version == _PLANS.version, _PLANS.summary)).label("summary"),
)
# A summary's columns and the row's version (the last column), for summaries written or rendered from rows.
_VERSIONED = COLUMNS.add_columns(_PLANS.version)
_OF_IDS = _VERSIONED.where(_PLANS.id.in_(bindparam("ids", expanding=True)))
# Written only over the version it was rendered from: a row that moved on meanwhile keeps what it has.
_WRITE = (
    update(PLANS)
    .where(_PLANS.id == bindparam("plan_id"), _PLANS.version == bindparam("of_version"))
    .values(summary=bindparam("new_summary"), summary_version=bindparam("of_version"))
)
_CHANGED = "plan_summaries.changed"  # session.info: the plans whose rows changed in its transaction
_BEHIND = _VERSIONED.where(
    or_(_PLANS.summary_version.is_(None), _PLANS.summary_version != _PLANS.version)
).limit(bindparam("batch"))


def summary_of(plan: Plan) -> dict[str, Any]:
    """The summary of a plan as it stands."""
    # A loaded column's value is in the instance's __dict__, where its instrumented attribute would read it
    # (at a tenth of the cost); the rest (the slugs, anything expired or unloaded) through the attribute.
    values = plan.__dict__
    return plan_summary(tuple(values[name] if name in values else getattr(plan, name) for name in _NAMES))


def keep_with(plan: Plan) -> None:
    """Give a new plan, about to be inserted, the summary its row keeps."""
    plan.summary, plan.summary_version = json_provider.served(summary_of(plan)), plan.version


def rewrite_on_commit(session: Session, plan_id: uuid.UUID) -> None:
    """Have the plan's summary written anew as `session` commits, its row having changed.

    At commit, not at once: on PostgreSQL a second UPDATE of a row in one transaction checks the row's
    foreign keys, which locks its budget's row to share. Written at once, after a commit's UPDATE of its plan
    and before the commit locked the budget for update, two commits on one budget each held the share lock
    that the other's FOR UPDATE waited for: a deadlock (tests/reliability/test_under_load.py). By the time
    the transaction commits it holds whatever rows it meant to lock."""
    session.info.setdefault(_CHANGED, set()).add(plan_id)


@event.listens_for(Session, "before_commit")
def _rewrite_changed(session: Session) -> None:
    changed = sorted(session.info.pop(_CHANGED, ()))
    if changed:
        _write(session, session.connection().execute(_OF_IDS, {"ids": changed}).all())


@event.listens_for(Session, "after_soft_rollback")
def _forget_changed(session: Session, previous_transaction: SessionTransaction) -> None:
    if previous_transaction.parent is None:  # the whole transaction, not a savepoint within it
        session.info.pop(_CHANGED, None)


def write_behind(session: Session, batch: int) -> int:
    """Write the summaries of up to `batch` plans whose summary is missing or behind their row (plans from
    before migration 0010); how many were read to write. Zero when every summary is current."""
    rows = session.connection().execute(_BEHIND, {"batch": batch}).all()
    if rows:
        _write(session, rows)
    return len(rows)


def _write(session: Session, rows: Sequence[Row[Any]]) -> None:
    """Store the summaries of these rows of _VERSIONED."""
    session.connection().execute(
        _WRITE,
        [{"plan_id": row.id, "new_summary": _rendered(row), "of_version": row.version} for row in rows],
    )


def summaries(session: Session, rows: Sequence[Row[Any]]) -> list[str]:
    """The summaries of a page's rows (of LISTED), in their order: those stored, and the others rendered from
    their rows with one statement."""
    missing = [row.id for row in rows if row.summary is None]
    rendered = {}
    if missing:
        for row in session.connection().execute(_OF_IDS, {"ids": missing}):
            rendered[row.id] = _rendered(row)
    return [row.summary if row.summary is not None else rendered[row.id] for row in rows]


def _rendered(row: Row[Any]) -> str:
    """The summary of a row of _VERSIONED, as stored and served."""
    return json_provider.served(plan_summary(row[:-1]))


def plan_summary(row: Sequence[Any]) -> dict[str, Any]:
    """PlanSummarySchema's dump of a plan, member for member and in its order, written out, from a row of
    COLUMNS (or the same values of a Plan): marshmallow's field-by-field dump of the 100 summaries of a page
    took half the time of GET /v1/plans?limit=100 (issue 24). tests/api/test_plan_summaries.py holds the two
    to the same bytes for plans of every kind, so a field added to the schema must be added here too (and
    the stored summaries cleared: see above)."""
    # Unpacked, not read by name: 30 attribute lookups on each row cost more than all the formatting below.
    # The columns come in the order COLUMNS selects them, the schema's.
    (
        id_,
        organization_slug,
        budget_id,
        parent_id,
        name,
        labels,
        status,
        hardware_slug,
        method,
        params,
        tokens,
        flops,
        predicted_loss,
        accelerators,
        days,
        accelerator_hours,
        cost,
        currency,
        start_at,
        end_at,
        created_by,
        created_at,
        committed_at,
        cancelled_at,
        started_at,
        finished_at,
        actual_accelerator_hours,
        actual_cost,
        tokens_trained,
    ) = row
    progress = Progress.of(status, cost, actual_cost, tokens, tokens_trained)
    return {
        "id": str(id_),
        "organization": organization_slug,
        "budget_id": None if budget_id is None else str(budget_id),
        "parent_id": None if parent_id is None else str(parent_id),
        "name": name,
        "labels": dict(labels),
        "status": status,
        "hardware": hardware_slug,
        "method": method,
        "params": float(params),
        "tokens": float(tokens),
        "flops": float(flops),
        "predicted_loss": None if predicted_loss is None else float(predicted_loss),
        "accelerators": int(accelerators),
        "days": float(days),
        "accelerator_hours": float(accelerator_hours),
        "cost": None if cost is None else format_money(cost),
        "currency": currency,
        "start_at": start_at.isoformat(),
        "end_at": end_at.isoformat(),
        "created_by": created_by,
        "created_at": created_at.isoformat(),
        "committed_at": None if committed_at is None else committed_at.isoformat(),
        "cancelled_at": None if cancelled_at is None else cancelled_at.isoformat(),
        "started_at": None if started_at is None else started_at.isoformat(),
        "finished_at": None if finished_at is None else finished_at.isoformat(),
        "actual_accelerator_hours": float(actual_accelerator_hours),
        "actual_cost": format_money(actual_cost),
        "tokens_trained": float(tokens_trained),
        "share_trained": float(progress.share_trained),
        # As Plan.estimate_at_completion: none for a plan without a cost.
        "estimate_at_completion": None if cost is None else format_money(progress.estimate_at_completion),
    }

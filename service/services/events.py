"""Events: what an orchestrator or a finance tool may want to hear of, written in the transaction of the
change they report, polled in order (GET /v1/events) and delivered to the organisation's webhooks.

Ids come from the "events" counter row, whose lock the writing transaction holds until it commits: events
become visible in the order of their ids, so a poller that asks for the events after the last id it saw never
misses one committed late. An event with a `key` is raised once: a threshold crossed, dropped below after a
reversal and crossed again is one event.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from service.data.models import Counter, Event, Webhook, WebhookDelivery, utcnow
from service.infra import background
from service.infra.after_commit import on_commit

# The types, with what their `data` holds: the one list (the API's enum and filter).
EVENT_TYPES = (
    "plan.approval_requested",  # committing it asked its budget's approvers (cost above approval_above)
    "plan.approved",  # a finance or admin key approved it: committed, reserved on its budget
    "plan.rejected",  # a finance or admin key rejected it: nothing reserved
    "plan.started",  # the plan's run began: its first usage record, or POST /start
    "plan.completed",
    "plan.failed",
    "plan.threshold_crossed",  # its actual cost or its forecast reached a share of its planned cost
    "budget.threshold_crossed",  # its spend or its forecast reached a share of its amount
)


def publish(
    session: Session,
    *,
    organization_id: uuid.UUID,
    type: str,
    subject_type: str,
    subject_id: uuid.UUID | str,
    data: dict[str, Any],
    key: str | None = None,
) -> Event | None:
    """Record an event (and a pending delivery to each of the organisation's webhooks that wants it); None
    when an event with this `key` was raised before.

    Call it last in a transaction: the counter row's lock is held until the commit, and a transaction that
    took another row's lock after it could wait on one that holds that row and waits for the counter.
    """
    assert type in EVENT_TYPES, f"unknown event type {type}"
    if key is not None and session.scalar(select(exists().where(Event.key == key))):
        return None
    taken = update(Counter).where(Counter.name == "events").values(value=Counter.value + 1)
    event_id = session.execute(taken.returning(Counter.value)).scalar_one()
    now = utcnow()
    event = Event(
        id=event_id,
        organization_id=organization_id,
        type=type,
        subject_type=subject_type,
        subject_id=str(subject_id),
        key=key,
        data=data,
        created_at=now,
    )
    session.add(event)
    wanted = select(Webhook.id).where(Webhook.organization_id == organization_id, Webhook.active.is_(True))
    for hook_id, types in session.execute(wanted.add_columns(Webhook.event_types)):
        if not types or type in types:
            session.add(WebhookDelivery(webhook_id=hook_id, event_id=event_id, next_attempt_at=now))
            # This process's sender delivers it as soon as it is committed, not at its next poll.
            on_commit(session, functools.partial(background.wake, background.WEBHOOK_SENDER))
    session.flush()
    return event

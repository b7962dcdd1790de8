"""The audit log: every change to an audited object, written in the same transaction as the change.

A `before_flush` hook sees every insert, update and delete, so no use case can forget to record one. Who
acted comes from the session (service/infra/actors.py: the caller's key id per request; "system" otherwise).
Entries hold names of changed fields, never values, so no secret can reach the log.
"""

from __future__ import annotations

import functools
import uuid

from sqlalchemy import event, insert, inspect, select
from sqlalchemy.orm import Session, UOWTransaction

from service.data.models import (
    ApiKey,
    AuditEntry,
    Base,
    Budget,
    Calibration,
    FitJob,
    FittedLaw,
    HardwarePrice,
    HardwareProfile,
    Organization,
    Plan,
    UsageRecord,
    Webhook,
    table_of,
    utcnow,
)
from service.infra import actors
from service.services.pagination import Cursor, Page, paginate

# What the log records, and the name each kind has in it.
Audited = (
    Organization
    | HardwareProfile
    | HardwarePrice
    | Budget
    | ApiKey
    | Plan
    | FittedLaw
    | FitJob
    | UsageRecord
    | Webhook
    | Calibration
)
_AUDITED: dict[type[Audited], str] = {
    Organization: "organization",
    HardwareProfile: "hardware",
    HardwarePrice: "hardware_price",
    Budget: "budget",
    ApiKey: "api_key",
    Plan: "plan",
    FittedLaw: "scaling_law",
    FitJob: "fit_job",
    UsageRecord: "usage",
    Webhook: "webhook",
    Calibration: "calibration",
}
_NOT_WORTH_LISTING = {"updated_at", "version"}
AUDIT_LOG = table_of(AuditEntry)


def _organization_of(obj: Audited) -> uuid.UUID | None:
    if isinstance(obj, Organization):
        return obj.id
    if isinstance(obj, HardwareProfile | HardwarePrice):  # shared by every organisation
        return None
    organization = obj.organization  # set before flush even where the id is not yet
    if organization is not None:
        if organization.id is None:
            organization.id = uuid.uuid4()
        return organization.id
    return obj.organization_id


def _object_id(obj: Audited) -> str:
    if isinstance(obj, HardwarePrice):  # a price is an event in its profile's history: name the profile
        return obj.hardware.slug if obj.hardware is not None else str(obj.hardware_id)
    name: str | None
    if isinstance(obj, ApiKey):
        name = obj.key_id
    elif isinstance(obj, Budget | Plan | UsageRecord | Webhook | Calibration):
        name = None  # known by their ids alone
    else:
        name = obj.slug
    return name or str(obj.id)


def changed_fields(obj: Base) -> list[str]:
    """The fields of `obj` set or changed since it was read (all it has, for a new one)."""
    state = inspect(obj)
    return sorted(key for key in _listed(type(obj)) if state.attrs[key].history.has_changes())


@functools.cache
def _listed(model: type[Base]) -> frozenset[str]:
    """The fields of `model` an entry may name: its columns and relationships (allowed hardware, say)."""
    mapper = inspect(model)
    fields = {*mapper.columns.keys(), *mapper.relationships.keys()} - _NOT_WORTH_LISTING
    if model is HardwarePrice:
        fields.discard("hardware")  # a price is logged under its profile's name
    return frozenset(fields)


@event.listens_for(Session, "before_flush")
def _record(session: Session, flush_context: UOWTransaction, instances: object) -> None:
    entries = []
    for action, objects in (("create", session.new), ("update", session.dirty), ("delete", session.deleted)):
        for obj in objects:
            kind = _AUDITED.get(type(obj))
            if kind is None or (
                action == "update" and not session.is_modified(obj, include_collections=False)
            ):
                continue
            if action == "create" and obj.id is None:
                obj.id = uuid.uuid4()  # the entry names the object; its id must exist now
            fields = [] if action == "delete" else changed_fields(obj)
            entries.append(AuditEntry(**_entry(session, action, obj, fields)))
    session.add_all(entries)


def record(session: Session, action: str, obj: Audited, fields: list[str]) -> None:
    """Log a change made with a Core statement (which the flush hook does not see), e.g. a plan's commit:
    with an INSERT of its own, at once, since an entry left to the next flush made that flush cost more than
    the change's own statement (issue 24)."""
    record_entry(session, entry(session, action, obj, fields))


def record_entry(session: Session, row: dict[str, object]) -> None:
    """Write an entry `entry` made."""
    session.execute(_INSERT, row)


def entry(session: Session, action: str, obj: Audited, fields: list[str]) -> dict[str, object]:
    """The row of the entry for a change made with a Core statement."""
    return {"id": uuid.uuid4(), "created_at": utcnow(), **_entry(session, action, obj, sorted(fields))}


_INSERT = insert(AUDIT_LOG)


def _entry(session: Session, action: str, obj: Audited, fields: list[str]) -> dict[str, object]:
    kind = _AUDITED[type(obj)]
    return {
        "actor": actors.actor(session),
        "organization_id": _organization_of(obj),
        "action": f"{kind}.{action}",
        "object_type": kind,
        "object_id": _object_id(obj),
        "request_id": actors.request_id(session),
        "fields": fields,
    }


def list_entries(
    session: Session, *, organization_id: uuid.UUID | None, limit: int, after: Cursor | None
) -> Page[AuditEntry]:
    stmt = select(AuditEntry)
    if organization_id is not None:
        stmt = stmt.where(AuditEntry.organization_id == organization_id)
    return paginate(session, stmt, AuditEntry, limit, after)

"""The audit log: every change to an audited object, written in the same transaction as the change.

A `before_flush` hook sees every insert, update and delete, so no use case can forget to record one. Who
acted comes from the session (service/infra/actors.py: the caller's key id per request; "system" otherwise).
Entries hold names of changed fields, never values, so no secret can reach the log.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import CTE, Insert, event, insert, inspect, select
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
from service.infra.prepared import Prepared, parameters_of, prefixed
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
    listed = _listed(type(obj))
    if state.transient:  # never stored: all it has, which its instance dict holds (a plan's fields among 45
        # attributes, without asking each for its history: issue 24)
        return sorted(listed.intersection(state.dict))
    return sorted(key for key in listed if state.attrs[key].history.has_changes())


@functools.cache
def _listed(model: type[Base]) -> frozenset[str]:
    """The fields of `model` an entry may name: its columns and relationships (allowed hardware, say)."""
    mapper = inspect(model)
    fields = {*mapper.columns.keys(), *mapper.relationships.keys()} - _NOT_WORTH_LISTING
    if model is HardwarePrice:
        fields.discard("hardware")  # a price is logged under its profile's name
    return frozenset(fields)


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
    _INSERT.execute(session, entry(session, action, obj, fields))


def entry(session: Session, action: str, obj: Audited, fields: list[str]) -> dict[str, object]:
    """The row of the entry for a change made with a Core statement, for `record` or a `WithEntry`."""
    return {"id": uuid.uuid4(), "created_at": utcnow(), **_entry(session, action, obj, sorted(fields))}


_INSERT = Prepared(insert(AUDIT_LOG))
_ENTRY = "entry_"  # what the entry's parameters are named in a WithEntry statement: this + the column's name


class WithEntry:
    """A Core INSERT of a change (a new plan, say) that writes the change's audit entry with it: in one
    statement where a WITH clause may hold an INSERT (PostgreSQL, a round trip fewer), as two elsewhere
    (SQLite, where a statement costs no round trip).

    Within `holding_writes` it writes nothing and is held back instead, for a statement that writes it with
    other rows (services/idempotency.claim_and_write: an Idempotency-Key's claim and record)."""

    def __init__(self, statement: Insert):
        self.table = statement.table
        self._alone = Prepared(statement)
        self._with_entry = Prepared(
            statement.add_cte(insert(AUDIT_LOG).values(parameters_of(AUDIT_LOG, _ENTRY)).cte("entry"))
        )

    def execute(self, session: Session, parameters: dict[str, object], entry_row: dict[str, object]) -> None:
        """Run the INSERT with `parameters`, and write `entry_row` (`entry`) with it."""
        held = session.info.get(_HELD_WRITES)
        if held is not None:
            held.append(HeldWrite(self, {**parameters, **prefixed(entry_row, _ENTRY)}))
        elif session.get_bind().dialect.name == "postgresql":
            self._with_entry.execute(session, {**parameters, **prefixed(entry_row, _ENTRY)})
        else:
            _INSERT.execute(session, entry_row)
            self._alone.execute(session, parameters)

    def written_for(self, source: CTE) -> tuple[CTE, CTE]:
        """The row's INSERT and its entry's as parts of a larger statement (PostgreSQL), each writing its row
        once for every row of `source` (none: nothing written); their parameters are a HeldWrite's."""
        return tuple(  # type: ignore[return-value]
            insert(table)
            .from_select(
                [column.key for column in table.columns],
                select(*parameters_of(table, prefix)).select_from(source),
            )
            .cte(name)
            for table, prefix, name in ((self.table, "", "written"), (AUDIT_LOG, _ENTRY, "entry"))
        )


@dataclass(frozen=True)
class HeldWrite:
    """A WithEntry INSERT held back by `holding_writes`, with the parameters it was given."""

    statement: WithEntry
    parameters: dict[str, object]


_HELD_WRITES = "audit.held_writes"


@contextmanager
def holding_writes(session: Session) -> Iterator[list[HeldWrite]]:
    """Hold back every WithEntry INSERT `session` runs meanwhile: they are in the list, not written."""
    held: list[HeldWrite] = []
    session.info[_HELD_WRITES] = held
    try:
        yield held
    finally:
        del session.info[_HELD_WRITES]


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


def install() -> None:
    """Hook the audit log into every session (idempotent)."""
    if not event.contains(Session, "before_flush", _record):
        event.listen(Session, "before_flush", _record)


def list_entries(
    session: Session, *, organization_id: uuid.UUID | None, limit: int, after: Cursor | None
) -> Page[AuditEntry]:
    stmt = select(AuditEntry)
    if organization_id is not None:
        stmt = stmt.where(AuditEntry.organization_id == organization_id)
    return paginate(session, stmt, AuditEntry, limit, after)

"""The declarative base, the column types the models share (UTC times, exact money), and helpers for Core
statements on their tables."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    DateTime,
    MetaData,
    Numeric,
    Table,
    TypeDecorator,
    literal,
    select,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import (
    DeclarativeBase,
)
from sqlalchemy.sql.selectable import ScalarSelect
from sqlalchemy.types import TypeEngine

if TYPE_CHECKING:
    from service.data.models.hardware import HardwareProfile
    from service.data.models.organizations import Organization

# Explicit constraint names, so that migrations can drop and alter them on every backend (SQLite's batch
# mode needs names to find them again).
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite stores no offset and returns naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


MONEY_SCALE = 6
_MONEY_QUANTUM = Decimal(1).scaleb(-MONEY_SCALE)


class Money(TypeDecorator[Decimal]):
    """An exact amount of money with 6 decimal places: NUMERIC(18, 6) on PostgreSQL.

    SQLite has no exact decimal type (NUMERIC columns hold doubles), so there the amount is stored as an
    integer count of millionths; SUM() over it stays exact and comes back through this type as a Decimal.
    """

    impl = Numeric(18, MONEY_SCALE)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(18, MONEY_SCALE, asdecimal=True))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Decimal | int | None:
        if value is None:
            return None
        exact = Decimal(value)
        if exact != exact.quantize(_MONEY_QUANTUM):
            raise ValueError(f"{value} has more than {MONEY_SCALE} decimal places")
        return int(exact.scaleb(MONEY_SCALE)) if dialect.name == "sqlite" else exact

    def process_result_value(self, value: Decimal | int | None, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return Decimal(int(value)).scaleb(-MONEY_SCALE)
        return Decimal(value)


def money_literal(amount: Decimal | None) -> BindParameter[Decimal]:
    """An amount as a bound parameter of the Money type, for SQL arithmetic on money columns."""
    return literal(amount, Money())


def utcnow() -> datetime:
    return datetime.now(UTC)


def table_of(model: type[Base]) -> Table:
    """A model's table, for Core statements (SQLAlchemy types `__table__` as any FROM clause)."""
    table = model.__table__
    assert isinstance(table, Table), f"{model.__name__} maps a table"
    return table


def id_by_slug(model: type[Organization | HardwareProfile], slug: str) -> ScalarSelect[uuid.UUID]:
    """The id of `model`'s row with this slug, as a scalar subquery to compare a foreign key with: NULL (so
    matching nothing) for an unknown slug. Both databases evaluate it once and seek an index by its value,
    in the same round trip as the query around it."""
    return select(model.id).where(model.slug == slug).scalar_subquery()


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)

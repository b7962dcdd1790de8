"""Statements of the hot paths, compiled once and run straight on the driver (issue 24).

Executed through SQLAlchemy, a statement costs a request 0.2-0.4 ms of Python (a statement's execution
context, its result's metadata, an ORM-enabled select's compile state) beside some 0.05 ms in the driver;
for a plan's four to six statements, a fifth to a third of its CPU (bench/RESULTS.md, issue 24). A `Prepared`
statement is compiled once per dialect, with its parameters' and columns' type processing looked up then,
so that running it is: convert the parameters, execute on the cursor of the session's connection, convert
the rows.

What SQLAlchemy does around a statement is kept: the transaction is the session's (begun by it, with the
engine's `begin` listener), the connection's and engine's before/after_cursor_execute listeners see the
statement (the tests count statements with them), and a driver error becomes SQLAlchemy's, a disconnect
invalidating the pool as it would (Connection._handle_dbapi_exception, SQLAlchemy's own handling).

For statements every request of a kind runs; others stay plain `session.execute`, the one way elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, Connection, Dialect, TableClause, bindparam
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.util.typing import TupleAny, Unpack

Processor = Callable[[Any], Any] | None


@dataclass(frozen=True)
class _Compiled:
    sql: str
    positional: bool
    names: tuple[str, ...]  # the parameters, in the statement's order
    keys: tuple[str, ...]  # the name each has in the driver's mapping (pyformat), escaped where needed
    fixed: Mapping[str, Any]  # parameters the statement gives a value itself (literals): not the caller's
    binds: tuple[Processor, ...]  # each parameter's conversion for the driver
    columns: tuple[Any, ...]  # the types of the columns it returns


class Prepared:
    """`statement` compiled once per dialect (the service configures its engines of one dialect alike: the
    same JSON serialiser, say). Its parameters are named (no expanding IN lists) and given by name, every
    one: an INSERT of a table lists every column, with no column defaults applied."""

    def __init__(self, statement: Select[Unpack[TupleAny]] | UpdateBase):
        self.statement = statement
        self._compiled: dict[str, _Compiled] = {}
        # Each result column's conversion from the driver, by dialect: known at the first execution, since
        # some (PostgreSQL's numerics) depend on the type the driver reports.
        self._results: dict[str, tuple[Processor, ...]] = {}

    def execute(self, session: Session, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run it in the session's transaction; the rows it returns, converted (none for most writes)."""
        connection = session.connection()
        dialect = connection.dialect
        compiled = self._compiled.get(dialect.name) or self._compile(dialect)
        fixed = compiled.fixed
        values = [
            value if convert is None else convert(value)
            for value, convert in zip(
                (parameters[name] if name not in fixed else fixed[name] for name in compiled.names),
                compiled.binds,
                strict=True,
            )
        ]
        arguments: Sequence[Any] | dict[str, Any] = (
            values if compiled.positional else dict(zip(compiled.keys, values, strict=True))
        )
        results = self._results.get(dialect.name)
        # Once its columns' conversions are known, whether it returns rows is too: the driver's description of
        # them, which psycopg builds anew on each call, is not asked for again.
        returns_rows = None if results is None else bool(compiled.columns)
        rows, description = run(connection, compiled.sql, arguments, returns_rows=returns_rows)
        if not rows:
            return rows
        if results is None:
            results = self._results[dialect.name] = tuple(
                type_.dialect_impl(dialect).result_processor(dialect, column[1])
                for type_, column in zip(compiled.columns, description, strict=True)
            )
        return [
            tuple(
                value if convert is None else convert(value)
                for value, convert in zip(row, results, strict=True)
            )
            for row in rows
        ]

    def first(self, session: Session, parameters: Mapping[str, Any]) -> tuple[Any, ...] | None:
        rows = self.execute(session, parameters)
        return rows[0] if rows else None

    def _compile(self, dialect: Dialect) -> _Compiled:
        compiled = self.statement.compile(dialect=dialect)
        names = tuple(compiled.positiontup or ()) if compiled.positional else tuple(compiled.binds)
        binds = compiled.binds
        escaped = compiled.escaped_bind_names
        prepared = _Compiled(
            sql=compiled.string,
            positional=compiled.positional,
            names=names,
            keys=tuple(escaped.get(name, name) for name in names),
            fixed={name: binds[name].effective_value for name in names if not binds[name].required},
            binds=tuple(binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names),
            # A select's columns, or those a write returns (none without RETURNING).
            columns=tuple(column.type for column in self.statement.exported_columns),
        )
        self._compiled[dialect.name] = prepared
        return prepared


def parameters_of(table: TableClause, prefix: str = "") -> list[BindParameter[Any]]:
    """A parameter for each column of `table`, named `prefix` + the column's name, of the column's type: the
    values of a row for an INSERT ... SELECT, or of several tables' rows in one statement (prefixed apart)."""
    return [bindparam(prefix + column.key, type_=column.type) for column in table.columns]


def prefixed(row: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """`row`'s values as the parameters `parameters_of(its table, prefix)` names."""
    return {prefix + name: value for name, value in row.items()}


def run(
    connection: Connection,
    sql: str,
    arguments: Sequence[Any] | dict[str, Any] = (),
    *,
    returns_rows: bool | None = None,
) -> tuple[list[tuple[Any, ...]], Sequence[Sequence[Any]]]:
    """`sql`, in the driver's terms, executed on the connection's driver cursor as SQLAlchemy would (its
    listeners, its errors): the rows, as the driver gives them, and the cursor's description of them, unless
    the caller says whether it returns rows (`returns_rows`), when the description is empty."""
    dispatch = connection.dispatch
    driver = connection.connection.dbapi_connection
    assert driver is not None, "a connection in a transaction has its driver's"
    cursor = driver.cursor()
    try:
        for listener in dispatch.before_cursor_execute:
            listener(connection, cursor, sql, arguments, None, False)
        cursor.execute(sql, arguments)
        dispatch.after_cursor_execute(connection, cursor, sql, arguments, None, False)
        description = cursor.description if returns_rows is None else None
        fetch = description is not None if returns_rows is None else returns_rows
        rows = list(cursor.fetchall()) if fetch else []
    except BaseException as error:
        # SQLAlchemy's own handling, as for any statement it runs: the error it raises in the driver's place
        # (IntegrityError, OperationalError...), and the connections it invalidates on a disconnect.
        connection._handle_dbapi_exception(error, sql, arguments, cursor, None)
    cursor.close()
    return rows, description or ()

"""Operator commands, under `flask --app service ...`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import click
from alembic import command
from flask import Flask, current_app
from flask.cli import AppGroup, with_appcontext
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.engine import ENGINE_VERSION
from service.data.models import Plan
from service.infra import actors, migrate
from service.infra.db import get_db
from service.services import keys, plans
from service.services.catalog import load_builtin_hardware, load_sample_offers
from service.services.errors import InvalidFieldError
from service.workers import jobs, webhook_sender

db_cli = AppGroup("db", help="Database schema (Alembic migrations).")


@db_cli.command("upgrade")
@click.argument("revision", default="head")
def db_upgrade(revision: str) -> None:
    """Apply migrations up to REVISION (default: head). Safe to re-run."""
    migrate.upgrade(get_db().engine, revision)
    click.echo(f"database at {revision}")


@db_cli.command("downgrade")
@click.argument("revision")
def db_downgrade(revision: str) -> None:
    """Revert migrations down to REVISION (`base` empties the schema)."""
    migrate.downgrade(get_db().engine, revision)
    click.echo(f"database at {revision}")


@db_cli.command("check")
def db_check() -> None:
    """Fail when the models and the migrations disagree."""
    migrate.check(get_db().engine)
    click.echo("models and migrations agree")


@db_cli.command("current")
def db_current() -> None:
    """Show the revision the database is at."""
    migrate.current(get_db().engine)


@db_cli.command("revision")
@click.option("-m", "--message", required=True)
def db_revision(message: str) -> None:
    """Write a new migration from the difference between the models and the database."""
    with get_db().engine.begin() as connection:
        command.revision(migrate.alembic_config(connection), message=message, autogenerate=True)


@click.command("setup")
@with_appcontext
def setup() -> None:
    """Bring a database up to date: apply migrations, then load the built-in data. Safe to re-run."""
    database = get_db()
    migrate.upgrade(database.engine)
    click.echo("database migrated to head")
    with database.sessionmaker() as session:
        load = load_builtin_hardware(actors.act_as(session, "setup"))
    click.echo(
        f"built-in hardware: {len(load.created)} created, {len(load.updated)} updated, "
        f"{len(load.repriced)} repriced, {len(load.unchanged)} unchanged"
    )
    if load.skipped:
        click.echo(f"left alone (custom profiles use these slugs): {', '.join(load.skipped)}", err=True)
    with database.sessionmaker() as session:
        sample = load_sample_offers(actors.act_as(session, "setup"))
    click.echo(f"sample offers: {len(sample)} created" if sample else "sample offers: none (offers exist)")
    admin_key = current_app.extensions["planner.config"].admin_key
    if admin_key:
        with database.sessionmaker() as session:
            record = keys.ensure_bootstrap_admin_key(actors.act_as(session, "setup"), admin_key)
        click.echo(f"admin key {record.key_id} (PLANNER_ADMIN_KEY) is in place")


keys_cli = AppGroup("keys", help="API keys.")


@keys_cli.command("create")
@click.option("--role", type=click.Choice(keys.ROLES), required=True)
@click.option("--organization", help="Organization slug (not for admin keys).")
@click.option("--name", required=True)
def keys_create(role: str, organization: str | None, name: str) -> None:
    """Issue a key and print it: the only time the full key is shown."""
    with get_db().sessionmaker() as session:
        try:
            issued = keys.create_key(
                actors.act_as(session, "cli"),
                keys.NewKey(role=role, organization_slug=organization, name=name),
            )
        except InvalidFieldError as error:
            raise click.UsageError(error.detail) from None
    click.echo(issued.key)


plans_cli = AppGroup("plans", help="Stored plans.")


@plans_cli.command("verify")
def plans_verify() -> None:
    """Re-evaluate every stored plan from its inputs and snapshot; fail if a plan of this engine differs.

    A plan made by an older engine (its snapshot's engine_version) may come out differently when the science
    changed since: it keeps the result it was made with, and is counted apart, by version."""
    checked, differing = 0, []
    older: dict[str, list[int]] = {}  # engine version -> [plans, of which would now differ]
    with get_db().read_sessionmaker() as session:
        for plan in _every_plan(session):
            same = plans.reevaluate(plan) == plan.result
            version = plan.snapshot["engine_version"]
            if version != ENGINE_VERSION:
                counts = older.setdefault(version, [0, 0])
                counts[0] += 1
                counts[1] += not same
                continue
            checked += 1
            if not same:
                differing.append(str(plan.id))
    click.echo(f"{checked} plans re-evaluated, {len(differing)} differ")
    if older:
        by_version = "; ".join(
            f"{version}: {made}, {changed} of them would now differ"
            for version, (made, changed) in older.items()
        )
        total = sum(made for made, _ in older.values())
        click.echo(f"{total} plans of older engines ({by_version}) keep the result they were made with")
    if differing:
        raise click.ClickException(
            f"plans of engine {ENGINE_VERSION} that differ: " + ", ".join(differing[:20])
        )


def _every_plan(session: Session, batch: int = 500) -> Iterator[Plan]:
    """Every stored plan, `batch` at a time in id order: a plain query per batch, which a reading session
    can run without a transaction (db.reading), where a streamed one would need a server-side cursor."""
    after = None
    while True:
        query = select(Plan).order_by(Plan.id).limit(batch)
        found = session.scalars(query if after is None else query.where(Plan.id > after)).all()
        yield from found
        if len(found) < batch:
            return
        after = found[-1].id
        session.expunge_all()  # memory stays one batch's


jobs_cli = AppGroup("jobs", help="Background fits.")


@jobs_cli.command("work")
@click.option("--once", is_flag=True, help="Run the jobs waiting now, then exit.")
@click.option("--poll", default=2.0, show_default=True, help="Seconds between looks for new jobs.")
def jobs_work(once: bool, poll: float) -> None:
    """Run fit jobs in the foreground (on hosts dedicated to fitting; set FIT_JOBS_IN_PROCESS=false on the
    API hosts then). Jobs are claimed through the database, so several workers can run side by side."""
    database = get_db()
    lease = timedelta(seconds=current_app.extensions["planner.config"].fit_job_lease_seconds)
    while True:
        done = jobs.run_pending(database, lease)
        if done:
            click.echo(f"{done} fit job(s) run")
        if once:
            return
        time.sleep(poll)


webhooks_cli = AppGroup("webhooks", help="Webhook deliveries.")


@webhooks_cli.command("work")
@click.option("--once", is_flag=True, help="Attempt the deliveries due now, then exit.")
@click.option("--poll", default=webhook_sender.POLL_SECONDS, show_default=True, help="Seconds between looks.")
def webhooks_work(once: bool, poll: float) -> None:
    """Send webhook deliveries in the foreground (set WEBHOOKS_IN_PROCESS=false on the API hosts then).
    Deliveries are claimed through the database, so several senders can run side by side."""
    database = get_db()
    config = current_app.extensions["planner.config"]
    settings = webhook_sender.Settings(config.webhook_timeout_seconds, config.webhook_max_attempts)
    while True:
        sent = webhook_sender.deliver_due(database, settings=settings)
        if sent:
            click.echo(f"{sent} delivery attempt(s)")
        if once:
            return
        time.sleep(poll)


def init_app(app: Flask) -> None:
    app.cli.add_command(db_cli)
    app.cli.add_command(setup)
    app.cli.add_command(keys_cli)
    app.cli.add_command(plans_cli)
    app.cli.add_command(jobs_cli)
    app.cli.add_command(webhooks_cli)

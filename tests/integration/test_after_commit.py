"""Work a transaction asks for once it commits (service/infra/after_commit.py): run on commit, never on a
rollback, and kept through a savepoint rolled back inside the transaction."""

from __future__ import annotations

from sqlalchemy import text

from service.infra.after_commit import on_commit


def test_what_a_transaction_asks_for_runs_once_it_commits(session):
    done: list[str] = []
    session.execute(text("SELECT 1"))  # as a use case's statements begin its transaction
    on_commit(session, lambda: done.append("counted"))
    assert done == []

    session.commit()
    session.commit()  # a second commit has nothing left to run

    assert done == ["counted"]


def test_what_a_rolled_back_transaction_asked_for_never_runs(session):
    done: list[str] = []
    session.execute(text("SELECT 1"))
    on_commit(session, lambda: done.append("counted"))

    session.rollback()
    session.commit()

    assert done == []


def test_a_savepoint_rolled_back_inside_the_transaction_keeps_what_it_asked_for(session):
    done: list[str] = []
    session.execute(text("SELECT 1"))
    on_commit(session, lambda: done.append("counted"))
    savepoint = session.begin_nested()
    savepoint.rollback()

    session.commit()

    assert done == ["counted"]

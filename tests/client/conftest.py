"""What every test of the client and the command line shares."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def tables_as_a_pipe_gets_them(monkeypatch):
    """The command line's tables as a file or a pipe gets them, 100 columns wide: pytest-xdist's workers
    export COLUMNS=80, which the command line honours."""
    monkeypatch.delenv("COLUMNS", raising=False)

"""What a fitted law warns of over HTTP (issue 18): runs that sway the fit, and an IsoFLOP fit (Approach 2)
made from runs that are not an IsoFLOP sweep. Both are stored with the law and shown whenever it is read.

The grid of starts is not what these tests are about: the fits search every 90th start of it.
"""

from __future__ import annotations

import pytest

from service.core import fit
from tests.api.test_laws import as_runs, isoflop_sweep
from tests.core.test_fit_influence import FEW_STARTS, with_short_big_runs
from tests.core.test_isoflop_fit import scattered_runs


@pytest.fixture(autouse=True)
def few_starts(monkeypatch):
    monkeypatch.setattr(fit, "default_grid", lambda: FEW_STARTS)


@pytest.fixture
def acme(client):
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201


def fitted(client, runs: list[dict], name: str) -> dict:
    response = client.post("/v1/scaling-laws", json={"organization": "acme", "name": name, "runs": runs})
    assert response.status_code == 201, response.get_json()
    law = response.get_json()
    read = client.get(response.headers["Location"])
    assert read.get_json()["warnings"] == law["warnings"]  # stored with the law, not made up per answer
    return law


def warnings_by_code(law: dict) -> dict[str, dict]:
    return {warning["code"]: warning for warning in law["warnings"]}


def test_a_fit_swayed_by_a_few_runs_warns_naming_them_and_the_allocation_without_them(client, acme):
    law = fitted(client, as_runs(*with_short_big_runs()), "Acme with short runs")
    warning = warnings_by_code(law)["influential_runs"]
    assert [run["index"] for run in warning["details"]["runs"]] == [36, 37]
    assert warning["details"]["runs"][0]["params"] == 5e9
    assert warning["details"]["runs"][0]["tokens"] == 6e8
    with_them = {entry["flops"]: entry["tokens_per_param"] for entry in law["fit"]["tokens_per_param"]}
    moves = warning["details"]["tokens_per_param"]
    assert [move["flops"] for move in moves] == [1e20, 1e22, 1e24]
    assert [move["with"] for move in moves] == list(with_them.values())
    assert moves[-1]["without"] > 2.5 * moves[-1]["with"]
    assert "run 36 (params 5e+09, tokens 6e+08" in warning["message"]


def test_scattered_runs_get_an_isoflop_fit_with_a_warning_naming_its_budgets(client, acme):
    law = fitted(client, as_runs(*scattered_runs()), "Acme scattered")
    assert law["isoflop"]["available"] is True
    warning = warnings_by_code(law)["not_an_isoflop_sweep"]
    assert warning["details"]["budgets"] == [budget["flops"] for budget in law["isoflop"]["budgets"]]
    assert warning["details"]["budgets_used"] == len(law["isoflop"]["budgets"])


def test_an_isoflop_sweep_gets_its_fit_without_a_warning(client, acme):
    law = fitted(client, isoflop_sweep(), "Acme isoflop")
    assert law["isoflop"]["available"] is True
    assert law["warnings"] == []

"""What is released: the server (compute-planner) and the client (compute-planner-client) as distributions of
their own, under one version (the README's version policy), with their metadata complete."""

from __future__ import annotations

import re
import tomllib

import pytest

from service.api import API_VERSION
from tests.commands import ROOT

SERVER = ROOT / "pyproject.toml"
CLIENT = ROOT / "clients" / "python" / "pyproject.toml"
SEMVER = r"\d+\.\d+\.\d+"


def project(path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def test_the_server_the_client_and_the_api_description_carry_one_release_version():
    version = project(SERVER)["version"]
    assert re.fullmatch(SEMVER, version)
    assert project(CLIENT)["version"] == version
    assert API_VERSION == version  # the OpenAPI document's info.version


def test_the_docs_state_the_version_policy():
    page = (ROOT / "docs" / "reference" / "versions.md").read_text()
    assert re.search(r"^# Versions$", page, re.MULTILINE)
    assert f"`{project(SERVER)['version']}`" in page


@pytest.mark.parametrize("path", [SERVER, CLIENT], ids=["server", "client"])
def test_each_distribution_has_complete_metadata(path):
    metadata = project(path)
    assert metadata["requires-python"] == ">=3.11"
    assert metadata["description"]
    assert (path.parent / metadata["readme"]).is_file()
    assert metadata["authors"]
    # No LICENSE file has been chosen for the repository: the packages say so, and refuse a public index.
    assert metadata["license"] == "LicenseRef-Proprietary"
    assert "Private :: Do Not Upload" in metadata["classifiers"]
    assert "Programming Language :: Python :: 3.11" in metadata["classifiers"]


def test_the_client_depends_on_requests_and_its_command_lines_libraries_only():
    names = {
        re.match(r"[A-Za-z0-9_.-]+", requirement).group(0) for requirement in project(CLIENT)["dependencies"]
    }
    assert names == {"requests", "click", "tabulate"}


def test_the_server_no_longer_ships_the_client():
    server = tomllib.loads(SERVER.read_text())
    assert "planner" not in server["project"].get("scripts", {})
    assert server["tool"]["setuptools"]["packages"]["find"]["include"] == ["service*"]

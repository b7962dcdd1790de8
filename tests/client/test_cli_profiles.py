"""Profiles in `planner`'s config file, and the order its settings come from: an option, then the
environment, then the profile chosen, then the default profile, then what is built in."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner_client import cli, profiles
from planner_client.client import DEFAULT_URL

KEY = "cpk_0f18e4d3ec84_s3cr3t-never-printed"
CONFIG = """
profile = "staging"

[profiles.default]
url = "https://default.example.com"
api_key = "cpk_default_key"
output = "json"

[profiles.staging]
url = "https://staging.example.com"

[profiles.prod]
url = "https://prod.example.com"
api_key = "cpk_prod_key"
output = "csv"
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A config directory of the test's own, and none of the environment's settings."""
    for name in ("PLANNER_URL", "PLANNER_API_KEY", "PLANNER_OUTPUT", "PLANNER_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "planner" / "config.toml"


@pytest.fixture
def called(monkeypatch) -> dict:
    """The server and key each command's client is made with; the server answers one organisation."""
    seen: dict = {}

    class Client:
        def __init__(self, url, key, **options):
            seen.update(url=url, key=key)

        def organizations(self, **_):
            return iter([{"slug": "acme", "name": "Acme", "created_at": "2026-01-01T00:00:00+00:00"}])

    monkeypatch.setattr(cli, "PlannerClient", Client)
    return seen


def output_of(text: str) -> str:
    """Which output a command printed: json, csv or a table."""
    if text.startswith("["):
        return "json"
    return "csv" if text.startswith("slug,name") else "table"


STAGING, PROD, DEFAULT = (
    "https://staging.example.com",
    "https://prod.example.com",
    "https://default.example.com",
)
ENV_URL, OPTION_URL = "https://env.example.com", "https://option.example.com"


@pytest.mark.parametrize(
    ("argv", "environment", "url", "key", "output"),
    [
        # the file's own choice (staging), falling back on the default profile for what it does not set
        ([], {}, STAGING, "cpk_default_key", "json"),
        (["--profile=prod"], {}, PROD, "cpk_prod_key", "csv"),
        ([], {"PLANNER_PROFILE": "prod"}, PROD, "cpk_prod_key", "csv"),
        (["--profile=default"], {"PLANNER_PROFILE": "prod"}, DEFAULT, "cpk_default_key", "json"),
        # the environment over any profile, an option over the environment
        (["--profile=prod"], {"PLANNER_URL": ENV_URL}, ENV_URL, "cpk_prod_key", "csv"),
        ([f"--url={OPTION_URL}"], {"PLANNER_URL": ENV_URL}, OPTION_URL, "cpk_default_key", "json"),
        (["--profile=prod"], {"PLANNER_API_KEY": "cpk_env_key"}, PROD, "cpk_env_key", "csv"),
        (["--api-key=cpk_option_key"], {"PLANNER_API_KEY": "cpk_env_key"}, STAGING, "cpk_option_key", "json"),
        (["--profile=prod"], {"PLANNER_OUTPUT": "table"}, PROD, "cpk_prod_key", "table"),
        (["--output=json"], {"PLANNER_OUTPUT": "table"}, STAGING, "cpk_default_key", "json"),
    ],
)
def test_a_setting_comes_from_the_option_the_environment_the_profile_the_default_profile_in_that_order(
    home, called, capsys, monkeypatch, argv, environment, url, key, output
):
    home.parent.mkdir(parents=True)
    home.write_text(CONFIG)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    assert cli.main([*argv, "organization", "list"]) == 0

    assert (called["url"], called["key"], output_of(capsys.readouterr().out)) == (url, key, output)


def test_without_a_config_file_the_built_in_defaults_apply(home, called, capsys):
    assert cli.main(["organization", "list"]) == 0
    assert (called["url"], called["key"]) == (DEFAULT_URL, None)
    assert output_of(capsys.readouterr().out) == "table"


@pytest.mark.parametrize("chosen", [["--profile=nope"], ["config", "use", "nope"]])
def test_a_profile_the_file_does_not_have_is_a_usage_error_naming_it_and_the_file(
    home, called, capsys, chosen
):
    home.parent.mkdir(parents=True)
    home.write_text(CONFIG)
    argv = chosen if chosen[0] == "config" else [*chosen, "organization", "list"]

    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"planner: no profile 'nope' in {home} (profiles: default, prod, staging)")
    assert called == {}  # nothing was sent


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[profiles.prod\nurl = 1", "not valid TOML"),
        ('[profiles.prod]\napikey = "cpk_x"', "[profiles.prod] apikey: unknown key"),
        ('[profiles.prod]\noutput = "yaml"', "'yaml' is not one of table, json, csv"),
        ('[profiles.prod]\nurl = "planner.example.com"', "is not an http:// or https:// URL"),
        ('[profiles.prod]\napi_key = "a"\napi_key_command = "b"', "has api_key and api_key_command"),
    ],
)
def test_a_config_file_that_is_not_valid_is_a_usage_error_saying_where(home, called, capsys, text, said):
    home.parent.mkdir(parents=True)
    home.write_text(text)

    assert cli.main(["organization", "list"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"planner: {home}: ")
    assert said in error


def test_config_set_writes_a_file_only_its_owner_may_read_and_config_list_masks_its_keys(home, capsys):
    assert cli.main(["config", "set", "--profile=prod", "url", "https://prod.example.com"]) == 0
    assert cli.main(["config", "set", "--profile=prod", "api_key", KEY]) == 0
    assert cli.main(["config", "set", "output", "csv"]) == 0  # the profile in force: default
    capsys.readouterr()

    assert cli.main(["config", "list", "--output=json"]) == 0

    listed = capsys.readouterr().out
    assert KEY not in listed
    assert json.loads(listed) == [
        {
            "current": False,
            "profile": "prod",
            "url": "https://prod.example.com",
            "api_key": "cpk_0f18e4d3ec84_****",  # its key id, which planner key list shows too
            "api_key_command": None,
            "output": None,
        },
        {
            "current": True,
            "profile": "default",
            "url": None,
            "api_key": None,
            "api_key_command": None,
            "output": "csv",
        },
    ]
    assert tomllib.loads(home.read_text())["profiles"]["prod"] == {
        "url": "https://prod.example.com",
        "api_key": KEY,
    }
    if os.name == "posix":
        assert stat.S_IMODE(home.stat().st_mode) == 0o600
        assert stat.S_IMODE(home.parent.stat().st_mode) == 0o700


def test_config_set_reads_a_key_given_as_dash_from_the_standard_input(home, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{KEY}\n"))

    assert cli.main(["config", "set", "api_key", "-"]) == 0

    assert KEY not in capsys.readouterr().out
    assert tomllib.loads(home.read_text())["profiles"]["default"]["api_key"] == KEY


def test_config_use_chooses_the_profile_in_force_and_unset_removes_a_key(home, called, capsys):
    assert cli.main(["config", "set", "--profile=prod", "url", "https://prod.example.com"]) == 0
    assert cli.main(["config", "set", "--profile=prod", "output", "json"]) == 0
    assert cli.main(["config", "use", "prod"]) == 0
    assert cli.main(["config", "unset", "output"]) == 0  # of the profile in force
    capsys.readouterr()

    assert cli.main(["organization", "list"]) == 0

    assert called["url"] == "https://prod.example.com"
    assert output_of(capsys.readouterr().out) == "table"
    assert tomllib.loads(home.read_text()) == {
        "profile": "prod",
        "profiles": {"prod": {"url": "https://prod.example.com"}},
    }


def test_config_set_refuses_a_value_the_file_could_not_use(home, capsys):
    assert cli.main(["config", "set", "output", "yaml"]) == 2
    assert "'yaml' is not one of table, json, csv" in capsys.readouterr().err
    assert cli.main(["config", "set", "colour", "blue"]) == 2  # not a key a profile has
    assert not home.exists()


def test_config_path_prints_where_the_file_is(home, capsys):
    assert cli.main(["config", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(home)


def test_config_path_follows_xdg_config_home_only_when_it_is_absolute(tmp_path):
    assert profiles.config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "planner" / "config.toml"
    relative = profiles.config_path({"XDG_CONFIG_HOME": "relative/dir"})
    assert relative == profiles.Path.home() / ".config" / "planner" / "config.toml"


def test_a_profiles_api_key_command_gives_the_key_when_a_command_needs_one(home, called, capsys):
    command = f"{sys.executable} -c \"print('{KEY}')\""
    assert cli.main(["config", "set", "api_key_command", command]) == 0

    assert cli.main(["organization", "list"]) == 0

    assert called["key"] == KEY


def test_an_api_key_command_that_fails_says_so_in_one_line(home, called, capsys):
    command = f"{sys.executable} -c \"import sys; sys.exit('vault is sealed')\""
    assert cli.main(["config", "set", "--profile=prod", "api_key_command", command]) == 0
    capsys.readouterr()

    assert cli.main(["--profile=prod", "organization", "list"]) == 1

    assert capsys.readouterr().err == f"planner: api_key_command of profile prod of {home}: vault is sealed\n"


@given(st.text())
def test_any_text_written_to_the_file_reads_back_the_same(text):
    assert tomllib.loads(f"value = {profiles.toml_string(text)}") == {"value": text}


def test_planner_help_states_where_settings_come_from():
    help_text = " ".join(cli.planner.help.split())
    order = [
        "an option",
        "the environment",
        "the profile chosen by --profile",
        "[profiles.default]",
        "built in",
    ]
    assert [help_text.index(said) for said in order] == sorted(help_text.index(said) for said in order)
    assert "$XDG_CONFIG_HOME/planner/config.toml" in help_text

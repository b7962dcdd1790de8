"""`planner completion bash|zsh|fish`: the script that completes planner's commands and options, from click's
shell completion, which a shell asks through _PLANNER_COMPLETE."""

from __future__ import annotations

import pytest

from planner_client import cli


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_a_script_that_asks_planner_for_its_completions(capsys, shell):
    assert cli.main(["completion", shell]) == 0

    script = capsys.readouterr().out
    assert script.strip()
    assert "_PLANNER_COMPLETE" in script
    assert f"{shell}_complete" in script  # what the script asks planner for: this shell's completions
    assert "planner" in script.replace("_PLANNER_COMPLETE", "")


def test_a_shell_planner_cannot_complete_for_is_a_usage_error(capsys):
    assert cli.main(["completion", "powershell"]) == 2
    assert "'powershell' is not one of 'bash', 'zsh', 'fish'" in capsys.readouterr().err


def test_the_help_says_how_to_install_it():
    help_text = cli.completion.help
    assert 'eval "$(planner completion bash)"' in help_text
    assert 'eval "$(planner completion zsh)"' in help_text
    assert "planner completion fish > ~/.config/fish/completions/planner.fish" in help_text


@pytest.mark.parametrize(
    ("words", "completed"),
    [
        ("planner pl", ["plain,plan"]),
        ("planner webhook ro", ["plain,rotate-secret"]),
        ("planner --output c", ["plain,csv"]),
        ("planner --profile p", ["plain,prod"]),  # the config file's profiles
    ],
)
def test_the_script_completes_commands_choices_and_profiles(capsys, monkeypatch, tmp_path, words, completed):
    config = tmp_path / "planner" / "config.toml"
    config.parent.mkdir()
    config.write_text('[profiles.prod]\nurl = "https://prod.example.com"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    # What the bash script sets before it runs planner.
    monkeypatch.setenv("_PLANNER_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - 1))

    with pytest.raises(SystemExit) as ended:
        cli.main([])

    assert ended.value.code == 0
    assert capsys.readouterr().out.split() == completed

"""The command line's conventions: --version, -v on either side of the subcommand, help on every
argument, one syntax for an option across subcommands, hints that work as typed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from docrefrag import cli_ask, cli_common, cli_parser, cli_store


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its prog, the nested ones too."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found[sub.prog] = sub
                found.update(_subparsers(sub))
    return found


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli_parser.build_parser().parse_args(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("docrefrag ")


@pytest.mark.parametrize("argv", [["-v", "docs"], ["docs", "-v"], ["docs", "--verbose"], ["models", "list", "-v"]])
def test_verbose_goes_before_or_after_the_subcommand(argv):
    assert cli_parser.build_parser().parse_args(argv).verbose is True


def test_without_verbose_it_is_off():
    assert cli_parser.build_parser().parse_args(["docs"]).verbose is False


def test_every_argument_has_help():
    for prog, parser in _subparsers(cli_parser.build_parser()).items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{prog}: {action.dest} has no help text"
            assert action.help.count("(default") <= 1, f"{prog}: {action.dest}: {action.help}"


@pytest.mark.parametrize("command", ["ask", "eval"])
def test_the_planner_modes_have_one_syntax(command):
    head = ["ask", "q"] if command == "ask" else ["eval", "mmlongbench", "--data", "x"]
    args = cli_parser.build_parser().parse_args([*head, "--hyde", "always", "--decompose", "never"])
    assert (args.hyde, args.decompose) == ("always", "never")
    assert cli_common.ask_config(args).search.hyde == "always"  # an end-to-end eval runs the graph with it


def test_the_demo_hint_names_a_command_that_runs(monkeypatch, tmp_path):
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    script = venv_bin / "docrefrag"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the venv is not activated
    assert cli_store._command() == str(Path(".venv/bin/docrefrag"))
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")  # activated
    assert cli_store._command() == "docrefrag"
    monkeypatch.setattr(sys, "argv", ["-m"])  # python -m docrefrag
    assert cli_store._command() == f"{sys.executable} -m docrefrag"


def test_the_progress_line_shows_the_round_and_the_tokens_and_is_cleared(capsys):
    from docrefrag.core.decoding import _PROGRESS

    line = cli_ask._ProgressLine()
    with line:
        assert _PROGRESS.get() == line.model  # the token loops report to it
        line.round = 2
        line.model(1204, 0)
        line.last = 0.0
        line.model(1204, 7)
        line.model(1204, 8)  # within a quarter second: not redrawn
    assert _PROGRESS.get() is None
    err = capsys.readouterr().err
    assert err == ("\r\033[K  round 2: model reading 1,204 tokens"
                   "\r\033[K  round 2: model read 1,204 tokens, wrote 7\r\033[K")

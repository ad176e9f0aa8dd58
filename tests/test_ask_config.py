"""Run settings: an `AskConfig` from a TOML or JSON file with command-line overrides, what a bad file
says, the options `docrefrag eval` refuses in modes that would ignore them, and the CLI's plan modes.
"""

from __future__ import annotations

import json
import re

import pytest

from docrefrag.graph.context import AskConfig


def test_ask_config_from_a_file_with_cli_overrides(tmp_path):
    from docrefrag.cli_common import ask_config
    from docrefrag.cli_parser import build_parser

    toml = tmp_path / "run.toml"
    toml.write_text('max_rounds = 3\ntau = 1\nanswerer = "chat"\nhyde = "never"\nfusion = "rrf"\n')
    config = AskConfig.from_file(toml)
    assert ((config.max_rounds, config.tau, config.answerer, config.hyde, config.fusion)
            == (3, 1.0, "chat", "never", "rrf"))
    (tmp_path / "run.json").write_text(json.dumps({"pages": 5}))
    assert AskConfig.from_file(tmp_path / "run.json").pages == 5
    args = build_parser().parse_args(["ask", "q", "--config", str(toml), "--max-rounds", "1", "--pages", "4"])
    config = ask_config(args)  # the file, then the options given on the command line
    assert (config.max_rounds, config.answerer, config.pages, config.fusion) == (1, "chat", 4, "rrf")
    assert ask_config(build_parser().parse_args(["ask", "q"])) == AskConfig()
    assert ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml),
                                                  "--hyde", "always"])).hyde == "always"
    toml.write_text("rerank = true\n")
    assert ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml)])).rerank
    assert not ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml), "--no-rerank"])).rerank
    chat = ask_config(build_parser().parse_args(["ask", "q", "--reranker", "chat"]))
    assert chat.rerank and chat.reranker == "chat"
    assert not ask_config(build_parser().parse_args(["ask", "q", "--reranker", "chat", "--no-rerank"])).rerank


@pytest.mark.parametrize("text, message", [
    ("max_round = 3\n", "unknown setting(s) max_round; known: max_rounds"),
    ("max_rounds = 2.5\n", "max_rounds must be of type int, got 2.5"),
    ("hyde = false\n", "hyde must be of type str, got False (when to write"),
    ('hyde = "sometimes"\n', "hyde must be one of disagreement, always, never"),
    ("disagreement = 2\n", "disagreement is a query disagreement in [0, 1]"),
    ("max_rounds = 0\n", "max_rounds must be >= 1"),
    ("max_rounds = \n", "is not valid TOML"),
    ('fusion = "bogus"\n', "fusion must be one of"),
    ("reader_pages = 0\n",
     "reader_pages (--pages with the reader) is the number of pages read and must be >= 1, got 0"),
])
def test_ask_config_file_errors_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        AskConfig.from_file(path)
    with pytest.raises(ValueError, match="does not exist"):
        AskConfig.from_file(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="cannot be read .*pass a TOML or JSON file"):
        AskConfig.from_file(tmp_path)  # a folder


def test_eval_refuses_planner_options_for_the_baselines(tmp_path, capsys):
    from docrefrag.cli import main

    rc = main(["eval", "mmlongbench", "--data", str(tmp_path), "--store", str(tmp_path / "s"), "--baselines",
               "--hyde", "always"])
    err = capsys.readouterr().err
    assert rc != 0 and "--hyde applies only to end-to-end runs; drop --baselines or --hyde" in err


def test_eval_refuses_a_chat_reranker_without_a_local_model(tmp_path, capsys):
    from docrefrag.cli import main

    rc = main(["eval", "mmlongbench", "--data", str(tmp_path), "--store", str(tmp_path / "s"), "--retrieval-only",
               "--reranker", "chat", "--llm", "openai:some-model@http://127.0.0.1:9/v1"])
    err = capsys.readouterr().err
    assert rc != 0 and "the chat reranker reads P('Yes') from a local model's logits" in err and "--llm local" in err
    assert not (tmp_path / "s").exists()  # refused before the store was created


@pytest.mark.parametrize("mode", ["--retrieval-only", "--baselines"])
def test_eval_refuses_end_to_end_options_it_would_ignore(tmp_path, capsys, mode):
    from docrefrag.cli import main

    rc = main(["eval", "mmlongbench", "--data", str(tmp_path), "--store", str(tmp_path / "s"), mode,
               "--extractor", "local"])
    err = capsys.readouterr().err
    assert rc != 0 and f"--extractor applies only to end-to-end runs; drop {mode} or --extractor" in err
    assert not (tmp_path / "s").exists()  # refused before anything was opened

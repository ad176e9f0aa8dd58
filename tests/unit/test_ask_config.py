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
    assert ((config.validation.max_rounds, config.validation.tau, config.reading.answerer, config.search.hyde,
             config.search.fusion)
            == (3, 1.0, "chat", "never", "rrf"))
    (tmp_path / "run.json").write_text(json.dumps({"pages": 5}))
    assert AskConfig.from_file(tmp_path / "run.json").reading.pages == 5
    args = build_parser().parse_args(["ask", "q", "--config", str(toml), "--max-rounds", "1", "--pages", "4"])
    config = ask_config(args)  # the file, then the options given on the command line
    assert (config.validation.max_rounds, config.reading.answerer, config.reading.pages, config.search.fusion) == (
        1, "chat", 4, "rrf")
    assert ask_config(build_parser().parse_args(["ask", "q"])) == AskConfig()
    assert ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml),
                                                  "--hyde", "always"])).search.hyde == "always"
    toml.write_text("rerank = true\n")
    assert ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml)])).reading.rerank
    assert not ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml), "--no-rerank"])).reading.rerank
    chat = ask_config(build_parser().parse_args(["ask", "q", "--reranker", "chat"])).reading
    assert chat.rerank and chat.reranker == "chat"
    assert not ask_config(build_parser().parse_args(["ask", "q", "--reranker", "chat", "--no-rerank"])).reading.rerank


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


@pytest.mark.parametrize("command", [["ask", "q"], ["eval", "mmlongbench", "--data", "d"]])
def test_every_setting_has_a_flag_that_sets_it(command):
    """The ask and eval flags are generated from the AskConfig fields: one per setting, with its help."""
    from docrefrag.cli_common import ask_config
    from docrefrag.cli_parser import build_parser

    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith(command[0]))
    flags = {o: a for a in sub._actions for o in a.option_strings}
    for name, (_, f) in AskConfig.settings().items():
        flag = f"--{name.replace('_', '-')}"
        assert flag in flags, f"no flag for the setting {name}"
        assert flags[flag].help.startswith(f.metadata["help"][:40])
        value = f.default
        other = (not value if isinstance(value, bool) else value + 1 if isinstance(value, int)
                 else value / 2 if isinstance(value, float) else value + "x" if flags[flag].choices is None
                 else next(c for c in flags[flag].choices if c != value))
        given = ([flag] if other else [f"--no-{flag[2:]}"]) if isinstance(value, bool) else [flag, str(other)]
        if name == "pages":  # --pages sets the chosen answerer's pages: the chat model's by default
            assert AskConfig().reading.answerer == "chat"
        config = ask_config(parser.parse_args([*command, *given]))
        assert config.flat()[name] == other, name
        assert {k: v for k, v in config.flat().items() if k != name and k != "rerank"} == {
            k: v for k, v in AskConfig().flat().items() if k != name and k != "rerank"}


def test_pages_flag_sets_the_chosen_answerers_pages():
    from docrefrag.cli_common import ask_config
    from docrefrag.cli_parser import build_parser

    def reading(*flags):
        return ask_config(build_parser().parse_args(["ask", "q", *flags])).reading

    assert (reading("--pages", "5").pages, reading("--pages", "5").reader_pages) == (5, 8)
    assert (reading("--answerer", "reader", "--pages", "5").pages,
            reading("--answerer", "reader", "--pages", "5").reader_pages) == (3, 5)
    both = reading("--answerer", "reader", "--pages", "5", "--reader-pages", "6")
    assert (both.pages, both.reader_pages) == (5, 6)
    assert [AskConfig.of(pages=4).reading.pages_read(r) for r in (1, 2, 3)] == [4, 6, 8]
    assert AskConfig.of(answerer="reader", reader_pages=7).reading.pages_read(2) == 9


def test_config_files_name_settings_flat_or_by_group(tmp_path):
    flat = tmp_path / "flat.toml"
    flat.write_text('max_rounds = 3\nhyde = "never"\nanswerer = "reader"\nevidence_steps = 9\n')
    nested = tmp_path / "nested.toml"
    nested.write_text('[validation]\nmax_rounds = 3\n[search]\nhyde = "never"\n[reading]\nanswerer = "reader"\n'
                      '[evidence_budgets]\nevidence_steps = 9\n')
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps({"max_rounds": 3, "search": {"hyde": "never"}, "answerer": "reader",
                                 "evidence_budgets": {"evidence_steps": 9}}))
    configs = [AskConfig.from_file(p) for p in (flat, nested, mixed)]
    assert configs[0] == configs[1] == configs[2] == AskConfig.of(max_rounds=3, hyde="never", answerer="reader",
                                                                  evidence_steps=9)
    assert AskConfig.from_values(configs[0].flat()) == configs[0]  # the flat form is a config file's
    assert configs[0].validation.max_rounds == 3 and configs[0].search.hyde == "never"
    with pytest.raises(ValueError, match=re.escape("search has no setting(s) max_rounds; its settings: fusion")):
        AskConfig.from_values({"search": {"max_rounds": 1}})
    with pytest.raises(ValueError, match="unknown setting"):
        AskConfig.from_values({"serch": {"hyde": "never"}})


def test_setting_names_are_unique_across_groups():
    from dataclasses import fields

    names = [f.name for group in fields(AskConfig) for f in fields(group.default_factory())]
    assert len(names) == len(set(names)) == len(AskConfig.settings())
    assert not set(names) & {g.name for g in fields(AskConfig)}

"""`docrefrag ask` on the command line: one-line errors (bad arguments, an empty store, an LLM
endpoint that is gone), the lines printed for an unsupported answer, and `--resume` taking the
stored options and refusing a conflicting one.

The `--llm module:factory` models below are found by the CLI as attributes of this module.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HYDE, QUESTION, REPO, scripted, subprocess_env
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

from docrefrag.agents.endpoint import LLMUnavailableError
from docrefrag.indexes.store import Store


def unavailable_llm() -> GenericFakeChatModel:
    """An `--llm module:factory` model: replies once (the answer, or a HyDE passage), then its endpoint is gone."""
    return scripted(HYDE, LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))[0]


def unsupported_llm() -> GenericFakeChatModel:
    """An `--llm module:factory` model that answers a value found on no page and judges it unsupported."""
    return scripted("Southport", "No")[0]


_FLAKY_CALLS: list[int] = []


def flaky_llm() -> GenericFakeChatModel:
    """An `--llm module:factory` model whose endpoint is down the first time it is made, and up after."""
    _FLAKY_CALLS.append(1)
    if len(_FLAKY_CALLS) == 1:
        return scripted(LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))[0]
    return scripted("4,812", "Yes")[0]


def _cli(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = subprocess_env()
    if pythonpath is not None:  # and tests/, for that module's `from conftest import`
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), str(REPO / "tests"),
                                             *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "docrefrag", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)


@pytest.mark.parametrize("created", [True, False], ids=["empty-store", "no-store"])
def test_cli_ask_on_an_empty_store_is_one_line(tmp_path, created):
    if created:
        Store(tmp_path / "store", create=True).close()
    proc = _cli("ask", "q", "--store", str(tmp_path / "store"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "docrefrag ingest" in line


@pytest.mark.parametrize("args, message", [
    ([], "--resume RUN_ID"), (["a question", "--resume", "abc"], "--resume RUN_ID"),
    (["--resume", "abc", "--doc", "x"], "drop --doc"),
    (["a question", "--llm-timeout", "0"], "--llm-timeout must be > 0"),
])
def test_cli_ask_checks_its_arguments_in_one_line(tmp_path, capsys, args, message):
    from docrefrag.cli import main

    assert main(["ask", *args, "--store", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_cli_llm_failure_is_one_line(tmp_path, ingest, light_pdf):
    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1))
    # pytest imports this file as the top-level module `test_ask_cli` from tests/integration/
    proc = _cli("ask", QUESTION, "--store", str(tmp_path / "store"), "--quiet", "--answerer", "chat",
                "--llm", f"{__name__}:unavailable_llm", pythonpath=Path(__file__).parent)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: LLM endpoint http://127.0.0.1:9/v1 refused the connection")


@pytest.mark.parametrize("abstain", [True, False], ids=["abstains", "answers"])
def test_cli_says_in_one_line_when_the_answer_is_not_supported(tmp_path, ingest, light_pdf, capsys, abstain):
    from docrefrag.cli import main

    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1))
    (tmp_path / "ask.toml").write_text(f"abstain = {str(abstain).lower()}\nhyde = 'never'\nmax_rounds = 1\n")
    assert main(["ask", QUESTION, "--store", str(tmp_path / "store"), "--quiet", "--answerer", "chat",
                 "--config", str(tmp_path / "ask.toml"), "--llm", f"{__name__}:unsupported_llm"]) == 0
    out = capsys.readouterr().out.splitlines()
    reason = "the pages read do not contain 'Southport'; the validator's confidence 0.00 is below 0.50"
    if abstain:
        assert out[0] == "answer: Not answerable"
        assert out[1] == f"  withheld: 'Southport' is not supported by the pages read ({reason})"
    else:
        assert out[0] == "answer: Southport"
        assert out[1] == f"  NOT SUPPORTED by the pages read: {reason}"
    assert out[-1].startswith("confidence 0.00, 1 round(s)")


def test_cli_resume_takes_the_stored_options_and_refuses_a_conflict(tmp_path, ingest, light_pdf, capsys):
    from docrefrag.cli import main

    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1))
    common = ["--store", str(tmp_path / "store"), "--quiet"]
    _FLAKY_CALLS.clear()
    assert main(["ask", QUESTION, *common, "--answerer", "chat", "--hyde", "never", "--max-rounds", "1",
                 "--llm", f"{__name__}:flaky_llm"]) == 2
    run_id = re.search(r"--resume (\w+)", capsys.readouterr().err).group(1)

    assert main(["ask", "--resume", run_id, *common, "--max-rounds", "2"]) == 2
    assert "started with max_rounds = 1, not 2" in capsys.readouterr().err
    assert main(["ask", "--resume", run_id, *common, "--llm", "local"]) == 2
    assert f"started with llm = '{__name__}:flaky_llm', not 'local'" in capsys.readouterr().err
    assert len(_FLAKY_CALLS) == 1  # refused before a model was made

    assert main(["ask", "--resume", run_id, *common]) == 0  # the stored --llm, --answerer, --hyde, --max-rounds
    assert capsys.readouterr().out.splitlines()[0] == "answer: 4812"  # in the form the question asks for
    assert len(_FLAKY_CALLS) == 2

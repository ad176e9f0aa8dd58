"""Runs of the ask graph through the API: a finished run checkpointed as plain data, a run whose model
fails mid-way (its checkpoint kept, its id named, resumed where it stopped), a reused thread id, a
resume with the options the run was started with, and an ask on an empty store.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from conftest import HYDE, QUESTION, entries, nodes_of, prompt_kind, scripted
from langgraph.checkpoint.sqlite import SqliteSaver

from docrefrag.agents.endpoint import LLMUnavailableError
from docrefrag.api import DocRefrag
from docrefrag.graph.context import AskConfig
from docrefrag.graph.graph import build_graph
from docrefrag.graph.run_checkpoints import run_checkpoints
from docrefrag.indexes.errors import StoreError


def assert_plain_data(value, where: str = "state") -> None:
    """Only JSON's own types (exactly: no numpy scalars, tensors, handles)."""
    if type(value) is dict:
        for k, v in value.items():
            assert type(k) is str, f"{where}: key {k!r}"
            assert_plain_data(v, f"{where}.{k}")
    elif type(value) in (list, tuple):
        for i, v in enumerate(value):
            assert_plain_data(v, f"{where}[{i}]")
    else:
        assert value is None or type(value) in (str, int, float, bool), f"{where} is a {type(value).__name__}"


def read_state(store_dir: Path, thread_id: str):
    """The checkpointed state of a run, through a fresh graph and connection."""
    with closing(sqlite3.connect(run_checkpoints(store_dir))) as conn:
        return build_graph(checkpointer=SqliteSaver(conn)).get_state({"configurable": {"thread_id": thread_id}})


def test_finished_run_is_checkpointed_as_plain_data(dr, report):
    store_dir, _ = report
    llm, _ = scripted(HYDE, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always"),
                    thread_id="checkpointed-run")
    assert result.thread_id == "checkpointed-run"

    snapshot = read_state(store_dir, "checkpointed-run")
    values = snapshot.values
    assert snapshot.next == ()
    assert values["question"] == QUESTION and values["answer"] == "4812"
    assert values["claims"] == result.claims and values["trace"] == result.trace
    assert values["plan"]["hyde"] == HYDE and values["verdict"]["supported"] is True
    json.dumps(values)
    assert_plain_data(values)


def test_ask_on_an_empty_store_says_to_ingest(store):
    llm, seen = scripted()
    with DocRefrag(store=store.root) as api, pytest.raises(StoreError, match="docrefrag ingest"):
        api.ask(QUESTION, llm=llm)
    assert seen == []


def test_llm_failure_mid_run_surfaces_and_keeps_the_checkpoint(dr, report):
    store_dir, _ = report
    llm, seen = scripted(HYDE, LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))
    with pytest.raises(LLMUnavailableError, match="127.0.0.1:9"):
        dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always"), thread_id="failed-run")
    assert [prompt_kind(p) for p in seen] == ["hyde", "answer"]

    snapshot = read_state(store_dir, "failed-run")
    assert snapshot.next == ("answer",)
    assert snapshot.values["plan"]["hyde"] == HYDE and snapshot.values["hits"]
    assert not snapshot.values.get("answer")
    assert nodes_of(snapshot.values["trace"]) == ["plan", "retrieve", "rerank"]


def test_a_failed_run_names_its_id_and_resumes_where_it_stopped(dr):
    config = AskConfig.of(answerer="chat", hyde="always")
    llm, _ = scripted(HYDE, LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))
    with pytest.raises(LLMUnavailableError) as failure:
        dr.ask(QUESTION, llm=llm, config=config, thread_id="resumable")
    assert any("run id resumable" in note and "--resume resumable" in note for note in failure.value.__notes__)

    llm, seen = scripted("4,812", "Yes")  # the endpoint is back: only the answer and the validation are left
    result = dr.resume("resumable", llm=llm, config=config)
    assert [prompt_kind(p) for p in seen] == ["answer", "validate"]
    assert result.question == QUESTION and result.answer == "4812" and result.confidence == 1.0
    assert nodes_of(result.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]
    with pytest.raises(ValueError, match="nothing to resume"):
        dr.resume("resumable", llm=llm, config=config)  # finished
    with pytest.raises(ValueError, match="nothing to resume"):
        dr.resume("no-such-run", llm=llm, config=config)


def test_a_reused_thread_reports_only_its_own_run(dr):
    config = AskConfig.of(answerer="chat", hyde="always", max_rounds=1)
    first = dr.ask(QUESTION, llm=scripted(HYDE, "Southport", "No")[0], config=config, thread_id="reused")
    second = dr.ask(QUESTION, llm=scripted(HYDE, "4,812", "Yes")[0], config=config, thread_id="reused")
    assert (first.answer, first.withheld) == ("Not answerable", "Southport") and second.answer == "4812"
    assert nodes_of(second.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]
    assert entries(second.trace, "answer")[0]["answer"] == "4812"
    assert 0 < second.ttft_s <= second.seconds and second.ttft_s != first.ttft_s  # measured on this run


def test_a_resume_runs_with_the_options_the_run_was_started_with(dr):
    from docrefrag.graph.run_checkpoints import RunOptions

    config = AskConfig.of(answerer="chat", hyde="always", max_rounds=1, abstain=False)
    llm, _ = scripted(HYDE, LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))
    with pytest.raises(LLMUnavailableError):
        dr.ask(QUESTION, llm=llm, config=config, thread_id="stored-options")
    assert dr.run_options("stored-options") == RunOptions(None, config, None)  # a model object: no spec to store
    with pytest.raises(ValueError, match="started with max_rounds = 1, not 2; drop that option"):
        dr.resume("stored-options", llm=scripted()[0], config=AskConfig.from_values({"max_rounds": 2}, config))
    with pytest.raises(ValueError, match="chat model passed as an object, which is not stored"):
        dr.resume("stored-options")
    result = dr.resume("stored-options", llm=scripted("Southport", "No")[0])  # config: the stored one
    assert (result.answer, result.rounds, result.withheld) == ("Southport", 1, "")  # one round, no abstention


def test_run_ids_and_the_checkpoints_file_come_from_one_place(tmp_path):
    from docrefrag.graph.run_checkpoints import new_run_id

    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 12 and int(i, 16) >= 0 for i in ids)
    assert new_run_id("q17").startswith("q17-") and len(new_run_id("q17")) == len("q17-") + 12
    assert run_checkpoints(tmp_path) == tmp_path / "checkpoints.sqlite"  # a store's
    rows = tmp_path / "mmlongbench-answers.jsonl"  # a benchmark run's, beside its rows
    assert run_checkpoints(rows.parent, rows.stem) == rows.with_suffix(".checkpoints.sqlite")

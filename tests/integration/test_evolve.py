"""The retrieval agent's versioned instructions through `docrefrag agent` on a real store, and `evolve`'s
rounds over the generated report (a scripted chat model)."""

from __future__ import annotations

import json

import pytest
from conftest import ANSWER_PAGE, scripted

from docrefrag.agents import prompts
from docrefrag.cli import main
from docrefrag.evals.datasets import Question
from docrefrag.evals.evolve import evolve
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store


def drop_instructions(store_dir) -> None:
    with Store(store_dir) as store, store.db:
        store.db.execute("DROP TABLE IF EXISTS agent_instructions")


@pytest.fixture
def no_instructions(report):
    """The shared report's store without any instructions version, before and after the test (other tests'
    asks store the seed; this test's versions must not reach theirs)."""
    drop_instructions(report[0])
    yield
    drop_instructions(report[0])


def test_agent_commands_show_set_use_and_history(report, no_instructions, tmp_path, capsys):
    store_dir, _ = report
    assert main(["agent", "show", "--store", str(store_dir)]) == 0
    assert capsys.readouterr().out.strip() == prompts.AGENT_SEED
    mine = tmp_path / "mine.txt"
    mine.write_text("1. Call bm25_search with the question's words.\n")
    assert main(["agent", "set", str(mine), "--store", str(store_dir)]) == 0
    assert "version 2 (parent 1), now active" in capsys.readouterr().out
    assert main(["agent", "history", "--store", str(store_dir), "--json"]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [(v["version"], v["origin"], v["active"]) for v in history] == [(1, "seed", False), (2, "user", True)]
    assert main(["agent", "use", "1", "--store", str(store_dir)]) == 0
    assert main(["agent", "history", "--store", str(store_dir)]) == 0
    assert "* v1" in capsys.readouterr().out
    assert main(["agent", "use", "9", "--store", str(store_dir)]) == 2
    assert "no agent instructions version 9" in capsys.readouterr().err


def test_evolve_keeps_only_a_rewrite_that_raises_validation_recall(report, no_instructions, embedder, tmp_path):
    """Four copies of the report's question over one document per split: the seed (one with no first rule in
    the template form, which the agent's code would execute) reads a page that misses the answer; the rewrite
    says to read page 4, and is kept as it finds the page."""
    store_dir, doc_id = report
    qs = [Question(f"q{d}", "mmlongbench", f"doc{d}.pdf", "Northfield passengers?", "4812", "Int", (ANSWER_PAGE,), ())
          for d in range(4)]
    doc_ids = {f"doc{d}.pdf": doc_id for d in range(4)}
    miss = '{"name": "read_page", "arguments": {"page": 1}}'
    hit = '{"name": "read_page", "arguments": {"page": ' + str(ANSWER_PAGE) + '}}'
    finish = '{"name": "finish"}'
    meta = [hit, "Lesson: read the table's page.", "1. Call read_page on page 4.\n2. Finish."]  # probe, lesson, rewrite
    # validation, training, the meta-agent, the candidate on validation, the test split unevolved and evolved
    llm, _ = scripted(miss, finish, miss, finish, *meta, hit, finish, miss, finish, hit, finish)
    with Store(store_dir) as store:
        store.instructions.active("Find the page that answers the question with the tools.")  # stored as version 1
        report_ = evolve(store, HybridSearcher(store, embedder), llm, llm, qs, doc_ids, tmp_path, rounds=1, steps=2,
                         sample=1, probes=1, per_split=1)
        history = store.instructions.history()
    assert report_["questions"] == {"train": 1, "validation": 1, "test": 1}
    (first, second) = report_["rounds"]
    assert first["validation"]["recall"] == 0.0 and second["kept"] and second["validation"]["recall"] == 1.0
    assert second["diagnoses"][0]["lesson"] == "read the table's page."
    assert [(v.version, v.origin, v.kept, v.active) for v in history] == [(1, "seed", True, False),
                                                                          (2, "evolve", True, True)]
    assert report_["test"]["unevolved"]["recall"] == 0.0 and report_["test"]["evolved"]["recall"] == 1.0
    assert (tmp_path / "evolution.png").stat().st_size > 0 and "| evolved |" in (tmp_path / "evolution.md").read_text()

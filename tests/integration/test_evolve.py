"""The retrieval agent's versioned instructions (store, API, `docrefrag agent`), the meta-agent's
diagnosis and rewrite, and `evolve`'s document split and rounds (a scripted chat model)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import ANSWER_PAGE, scripted
from langchain_core.tools import StructuredTool

from docrefrag.agents import prompts
from docrefrag.agents.meta_agent import Failure, RewriteError, clean_rewrite, diagnose, measure, rewrite
from docrefrag.cli import main
from docrefrag.evals.datasets import Question
from docrefrag.evals.evolve import Trajectory, _failures, evolve, scores, split_documents
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.instructions import AgentInstructions
from docrefrag.indexes.store import Store


def no_instructions(store_dir) -> None:
    """The shared report's store without any instructions version (other tests' asks store the seed)."""
    with Store(store_dir) as store, store.db:
        store.db.execute("DROP TABLE IF EXISTS agent_instructions")


def test_instructions_are_versioned_in_the_store(tmp_path):
    versions = AgentInstructions(sqlite3.connect(tmp_path / "c.sqlite"))
    seed = versions.active("Search first.")
    assert (seed.version, seed.origin, seed.active, seed.parent) == (1, "seed", True, None)
    assert versions.active("another seed").text == "Search first."  # the seed is stored once
    cand = versions.add("Read pages.", parent=1, origin="evolve", kept=False, scores={"validation": {"recall": 0.2}},
                        diagnoses=[{"lesson": "x"}])
    assert not cand.active and versions.active("s").version == 1
    versions.use(2)
    assert versions.active("s").version == 2 and [v.active for v in versions.history()] == [False, True]
    assert versions.score(2, {"test": {"recall": 0.5}}).scores == {"validation": {"recall": 0.2},
                                                                   "test": {"recall": 0.5}}
    with pytest.raises(ValueError, match="no agent instructions version 7; versions: 1, 2"):
        versions.use(7)
    with pytest.raises(ValueError, match="empty"):
        versions.add("  ", parent=1, origin="user")
    with pytest.raises(ValueError, match="origin"):
        versions.add("x", parent=1, origin="robot")


def test_agent_commands_show_set_use_and_history(report, tmp_path, capsys):
    store_dir, _ = report
    no_instructions(store_dir)
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


def pages_tool(pages: list[int]):
    def search_pages(query: str, doc: str | None = None) -> str:
        """Rank pages for a query; returns JSON hits."""
        return json.dumps([{"doc_id": doc, "page": p, "snippet": "t"} for p in pages])

    return StructuredTool.from_function(search_pages)


def test_the_meta_agent_probes_the_tools_then_states_a_lesson():
    failure = Failure("How many buses?", "a.pdf", [4], [1, 2, 3],
                      [{"tool": "search_pages", "args": {"query": "buses"}, "digest": "", "malformed": False,
                        "fallback": False, "pages": [["a.pdf", 1]], "opened": []}])
    llm, seen = scripted('{"name": "search_pages", "arguments": {"query": "fleet table"}}', '{"name": "finish"}',
                         "Lesson: search the table's words with search_pages.")
    found = diagnose(failure, "Search.", [pages_tool([4, 1])], llm, probes=2)
    assert found.lesson == "search the table's words with search_pages." and found.probe_found
    assert found.probes[0]["args"] == {"query": "fleet table", "doc": "a.pdf"}
    assert "search_pages(query='buses') -> pages [1]" in seen[-1] and "(found it)" in seen[-1]


def test_the_measured_diagnosis_probes_every_search_tool_without_a_model():
    failure = Failure("How many buses did Northfield run in 2019?", "a.pdf", [4], [1], [])
    found = measure(failure, [pages_tool([2, 4])])
    assert [p["args"]["query"] for p in found.probes] == ["How many buses did Northfield run in 2019?",
                                                          "Northfield 2019 buses run"]
    assert found.probe_found and [p["rank"] for p in found.probes] == [2, 2]
    assert "search_pages with the query 'How many buses did Northfield run in 2019?' ranks page 4 at 2" in found.lesson
    missed = measure(Failure("q?", "a.pdf", [9], [1], []), [pages_tool([1, 2, 3, 9])])
    assert not missed.probe_found and "no search" in missed.lesson


def test_a_rewrite_must_name_a_tool_and_stay_short():
    assert clean_rewrite("```\n1. Call bm25_search.\n```", ["bm25_search"]) == "1. Call bm25_search."
    with pytest.raises(RewriteError, match="names none of the tools"):
        clean_rewrite("1. Be careful.", ["bm25_search", "read_page"])
    long = "\n".join(f"{i}. Call read_page on page {i} when in doubt, then search again." for i in range(100))
    assert len(clean_rewrite(long, ["read_page"])) <= 1200
    llm, seen = scripted("1. Call bm25_search first.\n2. Finish.")
    assert rewrite("Search.", [], "no tool", ["bm25_search"], llm) == "1. Call bm25_search first.\n2. Finish."
    assert "Lessons from questions" in seen[0]


def question(qid: str, doc: str, pages: tuple[int, ...] = (1,)) -> Question:
    return Question(qid, "mmlongbench", doc, f"question {qid}?", "x", "Str", pages, ())


def test_the_split_keeps_each_document_in_one_part():
    qs = [question(f"{d}-{i}", f"doc{d}.pdf") for d in range(8) for i in range(3)] + [question("u", "doc0.pdf", ())]
    splits = split_documents(qs, seed=0)
    docs = {s: {q.doc_name for q in v} for s, v in splits.items()}
    assert [len(docs[s]) for s in ("train", "validation", "test")] == [4, 2, 2]
    assert not (docs["train"] & docs["validation"]) and not (docs["train"] & docs["test"])
    assert all(q.evidence_pages for v in splits.values() for q in v)  # no unanswerable question
    assert split_documents(qs, seed=0) == splits and split_documents(qs, seed=1) != splits
    assert [len(v) for v in split_documents(qs, seed=0, per_split=2).values()] == [2, 2, 2]


def test_scores_and_rotating_failure_samples():
    calls = [{"tool": "search_pages", "args": {}, "digest": "", "malformed": False, "fallback": False, "pages": [],
              "opened": []}]
    trajs = [Trajectory(str(i), "q", "a.pdf", [4, 5], handed, 0.0, calls, "finish")
             for i, handed in enumerate([[4, 5, 1], [1, 2, 3], [5, 7, 8], [1, 2, 3], [9, 8, 7]])]
    trajs = [Trajectory(t.qid, t.question, t.doc_id, t.evidence, t.handed,
                        len(set(t.evidence) & set(t.handed)) / 2, t.calls, t.stopped) for t in trajs]
    s = scores(trajs)
    assert (s["recall"], s["hit"], s["calls_per_question"], s["tools"]) == (0.3, 0.4, 1.0, {"search_pages": 5})
    first, second = _failures(trajs, 2, 1), _failures(trajs, 2, 2)
    assert [f.handed for f in first] == [[1, 2, 3], [1, 2, 3]] and [f.handed for f in second] == [[9, 8, 7],
                                                                                                [1, 2, 3]]


def test_evolve_keeps_only_a_rewrite_that_raises_validation_recall(report, embedder, tmp_path):
    """Four copies of the report's question over one document per split: the seed's agent searches a word
    that misses the answer's page; the rewrite says to read page 4, and is kept as it finds the page."""
    store_dir, doc_id = report
    qs = [question(f"q{d}", f"doc{d}.pdf", (ANSWER_PAGE,)) for d in range(4)]
    doc_ids = {f"doc{d}.pdf": doc_id for d in range(4)}
    miss = '{"name": "read_page", "arguments": {"page": 1}}'
    hit = '{"name": "read_page", "arguments": {"page": ' + str(ANSWER_PAGE) + '}}'
    finish = '{"name": "finish"}'
    meta = [hit, "Lesson: read the table's page.", "1. Call read_page on page 4.\n2. Finish."]  # probe, lesson, rewrite
    # validation, training, the meta-agent, the candidate on validation, the test split unevolved and evolved
    llm, _ = scripted(miss, finish, miss, finish, *meta, hit, finish, miss, finish, hit, finish)
    no_instructions(store_dir)
    with Store(store_dir) as store:
        report_ = evolve(store, HybridSearcher(store, embedder), llm, llm, qs, doc_ids, tmp_path, rounds=1, steps=2,
                         sample=1, probes=1, per_split=1)
        history = AgentInstructions(store.db).history()
    assert report_["questions"] == {"train": 1, "validation": 1, "test": 1}
    (first, second) = report_["rounds"]
    assert first["validation"]["recall"] == 0.0 and second["kept"] and second["validation"]["recall"] == 1.0
    assert second["diagnoses"][0]["lesson"] == "read the table's page."
    assert [(v.version, v.origin, v.kept, v.active) for v in history] == [(1, "seed", True, False),
                                                                          (2, "evolve", True, True)]
    assert report_["test"]["unevolved"]["recall"] == 0.0 and report_["test"]["evolved"]["recall"] == 1.0
    assert (tmp_path / "evolution.png").stat().st_size > 0 and "| evolved |" in (tmp_path / "evolution.md").read_text()

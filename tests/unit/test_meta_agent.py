"""The retrieval agent's instructions store, the meta-agent's diagnoses (probed and measured) and rewrite,
and `evolve`'s document split, scores and failure samples: no store, scripted chat models."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import scripted
from langchain_core.tools import StructuredTool

from docrefrag.agents.meta_agent import (
    Diagnosis,
    Failure,
    RewriteError,
    clean_rewrite,
    diagnose,
    measure,
    rewrite,
    rule_rewrite,
)
from docrefrag.evals.datasets import Question
from docrefrag.evals.evolve import Trajectory, _failures, scores, split_documents
from docrefrag.indexes.instructions import AgentInstructions


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
    assert [p["query_kind"] for p in found.probes] == ["the whole question", "the question's key words"]
    assert "search_pages with the query 'How many buses did Northfield run in 2019?' ranks page 4 at 2" in found.lesson
    missed = measure(Failure("q?", "a.pdf", [9], [1], []), [pages_tool([1, 2, 3, 9])])
    assert not missed.probe_found and "no search" in missed.lesson


def test_a_rewrite_must_name_a_tool_and_stay_short():
    assert clean_rewrite("```\n1. Call bm25_search.\n```", ["bm25_search"]) == "1. Call bm25_search."
    echoed = "1. Call search_pages first.\n2) Then read_page.\n\nLessons from questions:\n- use 'How many URLs?'"
    assert clean_rewrite(echoed, ["search_pages"]) == "1. Call search_pages first.\n2) Then read_page."
    assert clean_rewrite("Call search_pages, then finish.", ["search_pages"]) == "Call search_pages, then finish."
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


def test_the_rule_rewrite_writes_the_measured_best_search_first():
    def probe(tool: str, kind: str, rank: int | None) -> dict:
        return {"tool": tool, "query_kind": kind, "found": rank is not None and rank <= 3, "rank": rank}

    seed = "You find pages.\n1. First call search_pages with the key words.\n2. Reply finish when done."
    diagnoses = [Diagnosis("a?", "", [probe("search_pages", "the question's key words", 3),
                                      probe("bm25_search", "the whole question", 1)]),
                 Diagnosis("b?", "", [probe("bm25_search", "the whole question", 2),
                                      probe("search_pages", "the question's key words", None)])]
    text = rule_rewrite(seed, diagnoses)
    assert text.splitlines() == [
        "You find pages.",
        "1. First call bm25_search with the whole question as the query: on the questions missed before, that "
        "search ranked the answer's page in its first 3.",
        "2. Reply finish when done."]
    with pytest.raises(RewriteError, match="already the first rule"):
        rule_rewrite(text, diagnoses)
    with pytest.raises(RewriteError, match="no measured probe"):
        rule_rewrite(seed, [Diagnosis("c?", "", [probe("search_pages", "the whole question", None)])])

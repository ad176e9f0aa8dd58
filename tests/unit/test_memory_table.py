"""The experience memory's storage, `store.memory` (indexes/memory_table.py), on a new store and unit
vectors made here (no model weights): plans round-trip, the nearest plans by cosine within a scope, clear,
the plans of retired documents dropped, and `graph.memory.remember` through it (a catalog that cannot be
written loses the plan, never raises)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from docrefrag.graph.memory import remember
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.store import Store


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store", create=True) as s:
        for doc in ("a", "b"):
            s.catalog.begin(doc, f"{doc}.pdf", f"/docs/{doc}.pdf", "pdf", 1, 10)
        yield s


def _add(store: Store, question: str, embedding: np.ndarray, doc_ids: list[str]) -> int:
    return store.memory.add(question, embedding, doc_ids, [question, "sub"], {"pages": [], "sections": []},
                            ["plan", "answer"], 1, 0.9)


def test_a_plan_round_trips_and_plans_list_oldest_first(store):
    evidence = {"pages": [{"doc_id": "a", "page": 3}], "sections": [{"doc_id": "a", "id": "3:2", "text": "Part D"}]}
    first = store.memory.add("q1", unit(1, 0), ["a"], ["s1", "s2"], evidence, ["plan", "retrieve"], 2, 0.75)
    second = _add(store, "q2", unit(0, 1), ["a", "b"])
    assert second > first
    one, two = store.memory.plans()
    assert (one.id, one.question, one.doc_ids, one.sub_queries, one.evidence, one.nodes, one.rounds,
            one.confidence) == (first, "q1", ["a"], ["s1", "s2"], evidence, ["plan", "retrieve"], 2, 0.75)
    assert (two.id, two.doc_ids) == (second, ["a", "b"]) and 0 < one.created_at <= two.created_at


def test_nearest_keeps_the_k_closest_above_the_threshold_within_the_scope(store):
    far = _add(store, "far", unit(0, 1), ["a"])
    near_a = _add(store, "near a", unit(1, 0.1), ["a"])
    near_b = _add(store, "near b", unit(1, 0.3), ["b"])
    same = _add(store, "same as near a", unit(1, 0.1), ["a"])
    query = unit(1, 0)
    found = store.memory.nearest(query, 0.8, 3, None)
    assert [p.id for p, _ in found] == [same, near_a, near_b]  # nearest first; of equals, the newer first
    assert found[0][1] == pytest.approx(float(unit(1, 0.1) @ query))
    assert [p.id for p, _ in store.memory.nearest(query, 0.8, 1, None)] == [same]
    assert [p.id for p, _ in store.memory.nearest(query, 0.8, 3, ["b", "c"])] == [near_b]
    assert store.memory.nearest(query, 0.8, 3, ["c"]) == []
    assert [p.id for p, _ in store.memory.nearest(query, -1.0, 10, None)][-1] == far  # cosine 0, the farthest


def test_clear_removes_every_plan_and_counts_them(store):
    _add(store, "q1", unit(1, 0), ["a"])
    _add(store, "q2", unit(0, 1), ["b"])
    assert store.memory.clear() == 2
    assert store.memory.plans() == [] and store.memory.clear() == 0


def test_the_plans_over_no_remaining_document_are_dropped(store):
    _add(store, "q1", unit(1, 0), ["a"])  # over "a" alone
    both = _add(store, "q2", unit(0, 1), ["a", "b"])
    only_b = _add(store, "q3", unit(1, 1), ["b"])
    store.catalog.forget_unstarted("a")  # no page stored: its record goes
    with store.db:
        store.memory.drop_orphans()
    assert [p.id for p in store.memory.plans()] == [both, only_b]


class _Embedder:
    def embed_queries(self, questions: list[str]) -> list[list[float]]:
        return [list(unit(1, len(q) % 3)) for q in questions]


def _result(question: str) -> SimpleNamespace:
    """What `remember` reads of an AskResult: a citation without a region (so no evidence graph is read)."""
    citation = {"doc_id": "b", "page": 2, "bbox": None}
    return SimpleNamespace(question=question, claims=[{"citations": [citation, citation]}], rounds=1, confidence=0.8,
                           trace=[{"node": "plan"}, {"node": "retrieve"}, {"node": "plan"}])


def test_remember_stores_the_run_through_the_store(store):
    id_ = remember(store, _Embedder(), _result("How many?"), ["b"], {"sub_queries": []})
    (plan,) = store.memory.plans()
    assert plan.id == id_ and (plan.question, plan.doc_ids, plan.sub_queries, plan.nodes) == (
        "How many?", ["b"], ["How many?"], ["plan", "retrieve"])
    assert plan.evidence == {"pages": [{"doc_id": "b", "page": 2}], "sections": []}
    (found, similarity), = store.memory.nearest(unit(1, len("How many?") % 3), 0.99, 3, ["b"])
    assert found.id == id_ and similarity == pytest.approx(1.0)


def test_a_catalog_that_cannot_be_written_loses_the_plan_not_the_answer(store, caplog):
    store.db.execute("PRAGMA query_only = ON")  # as a read-only catalog
    with pytest.raises(StoreError, match="readonly"):
        _add(store, "q1", unit(1, 0), ["a"])
    with caplog.at_level(logging.WARNING, logger="docrefrag.graph.memory"):
        assert remember(store, _Embedder(), _result("How many?"), ["b"], {"sub_queries": ["x"]}) is None
    assert "was not stored in the experience memory" in caplog.text
    store.db.execute("PRAGMA query_only = OFF")
    assert store.memory.plans() == []

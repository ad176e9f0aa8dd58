"""Branch health (indexes/health.py): pseudo-queries from a document's own words, the chance-corrected
MRR of each branch on them, the fusion switching a failing branch off, and the store's record of it."""

from __future__ import annotations

import json

import numpy as np
import pymupdf
import pytest

from docrefrag.indexes import health as branch_health
from docrefrag.indexes.fusion import fuse, fuse_with_diagnostics
from docrefrag.indexes.health import MIN_PAGES, QUERIES, BranchHealth, health_of, pseudo_queries
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

CHUNKS = [(1, "too short"), (2, " ".join(f"alpha{i}" for i in range(20))), (3, " ".join(f"beta{i}" for i in range(12))),
          (4, " ".join(f"gamma{i}" for i in range(30)))]


def test_pseudo_queries_are_windows_of_a_chunk_and_the_same_for_the_same_document() -> None:
    queries = pseudo_queries("doc-a", CHUNKS, n=3, words=12)
    assert queries == pseudo_queries("doc-a", CHUNKS, n=3, words=12)
    assert sorted(page for page, _ in queries) == [2, 3, 4]  # page 1 has fewer than 12 words
    for page, query in queries:
        text = dict(CHUNKS)[page]
        assert len(query.split()) == 12 and query in text
    # every chunk thrice before any a 4th time
    more = [page for page, _ in pseudo_queries("doc-a", CHUNKS, n=10, words=12)]
    assert len(more) == 10 and sorted(more.count(p) for p in (2, 3, 4)) == [3, 3, 4]
    windows = {tuple(q for _, q in pseudo_queries(f"doc-{i}", CHUNKS[3:], n=1, words=12)) for i in range(10)}
    assert len(windows) > 1  # another document, another draw
    assert pseudo_queries("doc-a", [(1, "few words")], n=3) == []


def _runs(n_pages: int, rank_source, queries: int = 32, seed: int = 0):
    """Pseudo-query runs over pages 1..n where `rank_source(rng, source, scores)` sets one branch's scores."""
    rng = np.random.default_rng(seed)
    pages = list(range(1, n_pages + 1))
    out = []
    for _ in range(queries):
        source = int(rng.integers(1, n_pages + 1))
        found = rng.uniform(0.0, 1.0, n_pages)
        found[source - 1] = 2.0  # the sparse branch always ranks the source page first
        out.append((source, found, rank_source(rng, source, n_pages)))
    return pages, out


def test_health_is_one_for_a_branch_that_finds_the_page_and_about_zero_for_noise() -> None:
    pages, runs = _runs(40, lambda rng, source, n: rng.uniform(0.0, 1.0, n))
    h = health_of(pages, runs)
    assert h.sparse == pytest.approx(1.0) and abs(h.dense) < 0.1 and h.queries == 32
    _, flat = _runs(40, lambda rng, source, n: np.zeros(n))
    assert health_of(pages, flat).dense <= 0.0  # a constant branch: every page tied, no better than chance
    second = lambda rng, source, n: np.where(np.arange(1, n + 1) == source, 0.9, rng.uniform(0.0, 0.95, n))  # noqa: E731
    assert 0.2 < health_of(*_runs(40, second)).dense < 1.0  # often near the top, not always first
    missing = [(s, sp, np.full(40, np.nan)) for s, sp, _ in runs]  # no vector for any page
    assert health_of(pages, missing).dense <= 0.0


def test_short_documents_and_documents_with_little_text_are_not_judged() -> None:
    pages, runs = _runs(MIN_PAGES, lambda rng, source, n: rng.uniform(0.0, 1.0, n))
    assert np.isnan(health_of(pages, runs).sparse) and np.isnan(health_of(pages, runs).dense)
    empty = health_of(list(range(1, 30)), [])
    assert np.isnan(empty.sparse) and empty.queries == 0
    pages = list(range(1, 31))
    first = [(source, np.eye(30)[source - 1], np.eye(30)[source - 1]) for source in (1, 2, 1, 2, 1, 2)]
    assert np.isnan(health_of(pages, first).sparse)  # six draws, but from two pages only
    assert health_of(pages, [*first, first[0], (3, np.eye(30)[2], np.eye(30)[2])]).sparse == pytest.approx(1.0)


def test_fusion_switches_off_a_branch_far_below_the_other_on_its_document() -> None:
    rng = np.random.default_rng(3)
    sparse = rng.uniform(0.0, 1.0, 20)
    sparse[4] = 1.2
    dense = rng.normal(0.0, 1.0, 20)
    dense[11] = 8.0  # the dense branch stands out more: without health the fusion follows it
    assert np.argmax(fuse(sparse, dense)) == 11
    off = np.tile([0.9, 0.3], (20, 1))  # dense health 0.3 < 0.5 x 0.9
    fused, diag = fuse_with_diagnostics(sparse, dense, health=off)
    assert np.argsort(-fused, kind="stable").tolist() == np.argsort(-sparse, kind="stable").tolist()
    assert (diag.sparse_off, diag.dense_off) == (0, 20)
    fused, diag = fuse_with_diagnostics(sparse, dense, health=np.tile([0.3, 0.9], (20, 1)))
    assert np.argsort(-fused, kind="stable").tolist() == np.argsort(-dense, kind="stable").tolist()
    assert (diag.sparse_off, diag.dense_off) == (20, 0)
    for kept in (np.tile([0.9, 0.6], (20, 1)), np.full((20, 2), np.nan), np.tile([-0.1, 0.0], (20, 1))):
        assert np.array_equal(fuse(sparse, dense, health=kept), fuse(sparse, dense))  # close, unknown, both chance
    assert np.array_equal(fuse(sparse, dense, health=off, health_ratio=0.0), fuse(sparse, dense))


def test_a_switched_off_branch_counts_as_absent_on_its_document_only() -> None:
    sparse = np.array([5.0, 0.1, 0.2, 0.3, 0.1, 0.2])
    dense = np.array([0.1, 0.2, 0.9, 6.0, 0.3, 0.2])
    health = np.array([[0.9, 0.2]] * 3 + [[np.nan, np.nan]] * 3)  # dense fails on document a (the first 3) only
    fused, diag = fuse_with_diagnostics(sparse, dense, health=health)
    absent = np.where(np.arange(6) < 3, np.nan, dense)
    expected, plain = fuse_with_diagnostics(sparse, absent)  # the weight, R, Q and S without those scores too
    assert np.allclose(fused, expected) and diag.weight_sparse == plain.weight_sparse
    assert np.argsort(-fused[:3]).tolist() == [0, 2, 1]  # document a by BM25 (its page 2 was dense's favourite)
    assert (diag.sparse_off, diag.dense_off) == (0, 3) and diag.reliability_dense == plain.reliability_dense
    assert not np.allclose(fused, fuse(sparse, dense))
    for method in ("sum", "rrf", "sparse", "dense"):  # the comparison methods rank the scores as given
        assert np.array_equal(fuse(sparse, dense, method, health=health), fuse(sparse, dense, method))
    with pytest.raises(ValueError, match=r"health must give \(sparse, dense\) per candidate, shape \(6, 2\)"):
        fuse(sparse, dense, health=np.zeros((6, 3)))


def test_the_searcher_measures_a_document_once_and_the_store_keeps_the_record(tmp_path, store, ingest, embedder,
                                                                               light_pdf, check_consistent, monkeypatch,
                                                                               capsys):
    (short,) = ingest(store, light_pdf(tmp_path / "short.pdf", pages=MIN_PAGES, tag="short"))
    (long,) = ingest(store, light_pdf(tmp_path / "survey.pdf", pages=12))
    searcher = HybridSearcher(store, embedder)
    hits = searcher.search("badger count near station s010", k=3)
    assert hits[0].page == 10 and hits[0].doc_id == long.doc_id
    record = store.health.recorded([long.doc_id, short.doc_id])
    assert set(record) == {long.doc_id, short.doc_id}
    assert record[long.doc_id].queries == QUERIES  # 12 chunks of at least 12 words, windows drawn until QUERIES
    assert record[long.doc_id].sparse > 0.5 and record[long.doc_id].dense > 0.5  # both branches work here
    assert np.isnan(record[short.doc_id].sparse) and record[short.doc_id].queries == 0
    check_consistent(store)

    root = store.root
    store.close()
    with Store(root) as reopened:
        again = HybridSearcher(reopened, embedder)
        monkeypatch.setattr(branch_health, "measure", lambda searcher, doc_id: pytest.fail("measured twice"))
        assert branch_health.of_documents(again, [long.doc_id])[long.doc_id] == record[long.doc_id]
        assert again.search("badger count near station s010", k=1)[0].page == 10
        docs = {d.doc_id: d for d in reopened.catalog.documents()}
    assert docs[long.doc_id].health_measured and docs[long.doc_id].health_dense == record[long.doc_id].dense
    assert docs[short.doc_id].health_measured and docs[short.doc_id].health_sparse is None  # not judged
    from docrefrag import cli, cli_common

    assert cli.main(["docs", "--store", str(root)]) == cli_common.EXIT_OK
    listed = {line.split()[-1]: line for line in capsys.readouterr().out.splitlines()[1:]}
    h = record[long.doc_id]
    assert f" {h.sparse:.2f}/{h.dense:.2f} " in listed["survey.pdf"] and " n/a " in listed["short.pdf"]


def test_a_page_without_text_is_scored_by_neither_branch(tmp_path, store, ingest, embedder, light_pdf):
    doc = pymupdf.open(light_pdf(tmp_path / "survey.pdf", pages=8))
    doc.new_page(pno=2, width=595, height=842)  # a blank page 3
    doc.save(tmp_path / "gap.pdf")
    (result,) = ingest(store, tmp_path / "gap.pdf")
    pages, runs = branch_health.pseudo_query_runs(HybridSearcher(store, embedder), result.doc_id)
    assert pages == list(range(1, 10)) and len(runs) == QUERIES
    assert all(source != 3 and np.isnan(sparse[2]) and np.isnan(dense[2]) for source, sparse, dense in runs)
    assert all(np.isfinite(np.delete(sparse, 2)).all() and np.isfinite(np.delete(dense, 2)).all()
               for _, sparse, dense in runs)
    h = health_of(pages, runs)
    assert h.sparse > 0.5 and h.dense > 0.5


def test_a_replaced_document_loses_its_record(tmp_path, store, ingest, embedder, light_pdf):
    pdf = light_pdf(tmp_path / "survey.pdf", pages=8)
    (old,) = ingest(store, pdf)
    HybridSearcher(store, embedder).search("station s002", k=1)
    assert old.doc_id in store.health.recorded([old.doc_id])
    light_pdf(pdf, pages=8, tag="census")  # same path, new content
    (new,) = ingest(store, pdf)
    assert new.status == "replaced" and store.health.recorded([old.doc_id, new.doc_id]) == {}


def test_a_record_of_another_recipe_or_of_an_unfinished_document_is_measured_again(tmp_path, store, ingest,
                                                                                    embedder, light_pdf, monkeypatch):
    (doc,) = ingest(store, light_pdf(tmp_path / "survey.pdf", pages=8))
    searcher = HybridSearcher(store, embedder)
    calls = []
    monkeypatch.setattr(branch_health, "measure", lambda _, d: calls.append(d) or BranchHealth(0.8, 0.7, 64))
    branch_health.of_documents(searcher, [doc.doc_id])
    assert branch_health.of_documents(searcher, [doc.doc_id]) == {doc.doc_id: BranchHealth(0.8, 0.7, 64)}
    assert calls == [doc.doc_id]
    store.catalog.finish(doc.doc_id)  # a resumed ingest finishing: its pages may have changed
    branch_health.of_documents(searcher, [doc.doc_id])
    assert calls == [doc.doc_id] * 2
    monkeypatch.setattr(branch_health, "VERSION", 999)  # another recipe
    branch_health.of_documents(searcher, [doc.doc_id])
    assert calls == [doc.doc_id] * 3
    store.health.record("retired", BranchHealth(0.8, 0.7, 64))  # no such ready document: nothing kept
    assert store.health.recorded(["retired"]) == {}


def test_api_ingest_measures_the_new_documents(tmp_path, light_pdf):
    from docrefrag import DocRefrag

    with DocRefrag(store=tmp_path / "store") as api:
        (result,) = api.ingest(light_pdf(tmp_path / "survey.pdf", pages=8), workers=1)
        health = api.open_store().health.recorded([result.doc_id])[result.doc_id]
        assert health.queries == QUERIES and health.sparse > 0.5 and health.dense > 0.5


def test_the_benchmark_harness_ingests_as_the_api_does(tmp_path, store, embedder, light_pdf):
    from docrefrag.evals.harness import prepare

    light_pdf(tmp_path / "documents" / "survey.pdf", pages=8)
    (tmp_path / "samples.json").write_text(json.dumps([
        {"doc_id": "survey.pdf", "doc_type": "Guidebook", "question": "How many badgers near station s004?",
         "answer": "3", "evidence_pages": "[4]", "evidence_sources": "['Pure-text (Plain-text)']",
         "answer_format": "Int"}]))
    present, doc_ids, missing = prepare("mmlongbench", tmp_path, store, None, False, embedder)
    assert len(present) == 1 and missing == 0
    doc_id = doc_ids["survey.pdf"]
    health = store.health.recorded([doc_id])[doc_id]  # measured at the ingest's end
    assert health.queries == QUERIES and health.sparse > 0.5 and health.dense > 0.5

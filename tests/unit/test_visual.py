"""VisualIndex on both backends: qdrant-edge (embedded) and the server backend, the latter
driven through qdrant-client's local mode (same client API as a server, no server needed)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest

from docrefrag.indexes import visual, visual_backends
from docrefrag.indexes.visual import VisualIndex
from docrefrag.indexes.visual_backends import QdrantUnavailableError, VisualHit, VisualIndexLockedError

DIM = 32

# qdrant-client's local mode, standing in for a server, warns that it ignores these settings
pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning"),
    # qdrant-client's background version check, on the dead URL
    pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning"),
]


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def make_page(rng: np.random.Generator, n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    chunks = unit(rng.standard_normal((n, DIM)).astype(np.float32))  # (n, DIM)
    return unit(chunks.mean(axis=0)), chunks  # (DIM,), (n, DIM)


def fill(index: VisualIndex, docs=("doc-a", "doc-b", "doc-c"), pages: int = 5, seed: int = 0) -> dict:
    """Three documents of random pages; returns {(doc_id, page): chunks}."""
    rng = np.random.default_rng(seed)
    items, chunks_of = [], {}
    for doc_id in docs:
        for page in range(1, pages + 1):
            pooled, chunks = make_page(rng)
            items.append((doc_id, page, pooled, chunks))
            chunks_of[(doc_id, page)] = chunks
    assert index.upsert_pages(items, batch_size=4) == len(items)
    return chunks_of


def near(vector: np.ndarray, seed: int = 1, noise: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return unit(vector + noise * rng.standard_normal(DIM).astype(np.float32))


@pytest.fixture(params=["edge", "server"])
def open_index(request, tmp_path: Path, monkeypatch):
    """A factory: open_index() opens (or reopens) the same index on the parametrised backend."""
    if request.param == "server":
        from qdrant_client import QdrantClient

        monkeypatch.setattr(
            visual_backends.ServerBackend,
            "_make_client",
            staticmethod(lambda url, api_key: QdrantClient(path=str(tmp_path / "server"))),
        )
        return lambda: VisualIndex(url="http://qdrant.test:6333", dim=DIM)
    return lambda: VisualIndex(path=tmp_path / "visual", dim=DIM)


@pytest.fixture
def index(open_index):
    with open_index() as idx:
        yield idx


def test_search_returns_the_page_whose_chunk_matches_best(index):
    chunks_of = fill(index)
    hits = index.search(near(chunks_of[("doc-b", 3)][2]), k=3)
    assert len(hits) == 3
    assert isinstance(hits[0], VisualHit)
    assert (hits[0].doc_id, hits[0].page) == ("doc-b", 3)
    assert hits[0].score > 0.95
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_search_is_the_exact_top_k_by_best_chunk_plus_weighted_pooled_cosine(index, monkeypatch):
    """More pages than the first width, so the threshold check (and its widening) decides."""
    monkeypatch.setattr(visual, "MIN_WIDTH", 4)
    rng = np.random.default_rng(7)
    items = []
    for page in range(1, 61):
        chunks = unit(rng.standard_normal((3, DIM)).astype(np.float32))  # (3, DIM)
        pooled = unit(rng.standard_normal(DIM).astype(np.float32))  # not the chunks' mean: the terms disagree
        items.append(("doc-a" if page <= 40 else "doc-b", page, pooled, chunks))
    index.upsert_pages(items)
    for _ in range(5):
        query = unit(rng.standard_normal(DIM).astype(np.float32))
        for docs in (None, ["doc-a"]):
            kept = [it for it in items if docs is None or it[0] in docs]
            score = {(d, pg): float((c @ query).max() + visual.POOLED_WEIGHT * (pooled @ query))
                     for d, pg, pooled, c in kept}
            expected = sorted(score, key=lambda key: -score[key])[:3]
            hits = index.search(query, k=3, doc_ids=docs)
            assert [(h.doc_id, h.page) for h in hits] == expected
            assert [h.score for h in hits] == pytest.approx([score[key] for key in expected], abs=1e-5)


def test_a_page_second_in_both_lists_but_best_overall_is_found(index, monkeypatch):
    """Six pages beat it on their best chunk and six others on their pooled vector, so it is in
    neither first list (width 4); it has the best page score, and the search widens to it."""
    monkeypatch.setattr(visual, "MIN_WIDTH", 4)
    query = np.eye(DIM, dtype=np.float32)[0]
    def along(cos: float, axis: int) -> np.ndarray:  # a unit vector at cosine `cos` to the query
        return (cos * np.eye(DIM)[0] + np.sqrt(1 - cos ** 2) * np.eye(DIM)[axis]).astype(np.float32)
    items = [("doc", p, along(-0.8, p), along(1.0, p)[None, :]) for p in range(1, 7)]  # chunk 1.0, pooled -0.8
    items += [("doc", p, along(1.0, p), along(0.3, p)[None, :]) for p in range(7, 13)]  # chunk 0.3, pooled 1.0
    items.append(("doc", 13, along(0.9, 13), along(0.9, 14)[None, :]))  # 0.9 and 0.9: 1.35 against 0.6 and 0.8
    index.upsert_pages(items)
    hit = index.search(query, k=1)[0]
    assert (hit.page, hit.score) == (13, pytest.approx(0.9 + visual.POOLED_WEIGHT * 0.9, abs=1e-5))


def test_vector_search_scores_one_term_alone(index):
    chunks_of = fill(index)
    query = near(chunks_of[("doc-a", 4)][0])
    best = index.vector_search(query, "chunks", k=15)
    pooled = {(h.doc_id, h.page): h.score
              for h in index.vector_search(query, "pooled", k=15, doc_ids=["doc-a", "doc-b"])}
    assert [h.score for h in best] == pytest.approx(
        sorted((float((c @ query).max()) for c in chunks_of.values()), reverse=True), abs=1e-5)
    assert {d for d, _ in pooled} == {"doc-a", "doc-b"} and len(pooled) == 10
    for hit in index.search(query, k=15, doc_ids=["doc-a"]):
        chunk_score = float((chunks_of[(hit.doc_id, hit.page)] @ query).max())
        assert hit.score == pytest.approx(chunk_score + visual.POOLED_WEIGHT * pooled[(hit.doc_id, hit.page)], abs=1e-5)
    with pytest.raises(ValueError, match="using must be 'chunks' or 'pooled'"):
        index.vector_search(query, "pages")
    assert index.vector_search(query, "pooled", doc_ids=[]) == []


def test_doc_filter_restricts_results(index):
    chunks_of = fill(index)
    query = near(chunks_of[("doc-b", 3)][0])
    hits = index.search(query, k=20, doc_ids=["doc-a", "doc-c"])
    assert {h.doc_id for h in hits} == {"doc-a", "doc-c"}
    assert len(hits) == 10
    assert index.search(query, k=5, doc_ids=[]) == []


def test_delete_doc_removes_only_that_doc(index):
    fill(index)
    assert index.count() == 15
    index.delete_doc("doc-a")
    assert index.doc_pages("doc-a") == set()
    assert index.doc_pages("doc-b") == {1, 2, 3, 4, 5}
    assert index.count() == 10
    hits = index.search(unit(np.ones(DIM, dtype=np.float32)), k=15)
    assert {h.doc_id for h in hits} == {"doc-b", "doc-c"}


def test_reopen_after_close_keeps_data(open_index):
    with open_index() as index:
        chunks_of = fill(index)
        query = near(chunks_of[("doc-c", 4)][1])
        before = index.search(query, k=5)
    with open_index() as index:
        assert index.count() == 15
        assert index.doc_pages("doc-c") == {1, 2, 3, 4, 5}
        after = index.search(query, k=5)
        assert [(h.doc_id, h.page) for h in after] == [(h.doc_id, h.page) for h in before]
        assert [h.score for h in after] == pytest.approx([h.score for h in before], abs=1e-6)
        assert (before[0].doc_id, before[0].page) == ("doc-c", 4)


def test_first_stage_prefetch_keeps_the_same_top1(index):
    chunks_of = fill(index)
    query = near(chunks_of[("doc-a", 2)][1])
    exact = index.search(query, k=3)
    staged = index.search(query, k=3, first_stage=5)
    assert (staged[0].doc_id, staged[0].page) == (exact[0].doc_id, exact[0].page) == ("doc-a", 2)
    assert staged[0].score == pytest.approx(exact[0].score, abs=1e-5)
    filtered = index.search(query, k=3, doc_ids=["doc-b"], first_stage=4)
    assert {h.doc_id for h in filtered} == {"doc-b"}


def test_upsert_replaces_a_page_and_drops_zero_rows(index):
    rng = np.random.default_rng(3)
    pooled, chunks = make_page(rng)
    index.upsert_page("doc-x", 1, pooled, chunks)
    target = unit(rng.standard_normal(DIM).astype(np.float32))
    with_zero_row = np.vstack([np.zeros((1, DIM), np.float32), target[None, :]])  # (2, DIM)
    index.upsert_page("doc-x", 1, target, with_zero_row)
    assert index.count() == 1
    hit = index.search(target, k=1)[0]
    assert (hit.doc_id, hit.page) == ("doc-x", 1)
    assert hit.score == pytest.approx(1.0 + visual.POOLED_WEIGHT, abs=1e-5)  # both cosines are 1


def test_blank_page_is_not_stored_and_replaces_an_old_version(index):
    rng = np.random.default_rng(4)
    index.upsert_page("doc-x", 1, *make_page(rng))
    index.upsert_page("doc-x", 2, *make_page(rng))
    blank = (np.zeros(DIM, np.float32), np.zeros((3, DIM), np.float32))
    assert index.upsert_pages([("doc-x", 1, *blank), ("doc-x", 3, *blank)]) == 0
    assert index.doc_pages("doc-x") == {2}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """One empty embedded index shared by the input-validation tests (nothing valid is written)."""
    with VisualIndex(path=tmp_path_factory.mktemp("scratch"), dim=DIM) as index:
        yield index


_GOOD_POOLED = unit(np.ones(DIM, dtype=np.float32))
_GOOD_CHUNKS = unit(np.ones((2, DIM), dtype=np.float32))


@pytest.mark.parametrize(
    "page, pooled, chunks, match",
    [
        (0, _GOOD_POOLED, _GOOD_CHUNKS, "1-based"),
        (1, np.ones(DIM + 1, np.float32), _GOOD_CHUNKS, r"pooled must have shape \(32,\), got \(33,\)"),
        (1, _GOOD_POOLED, np.ones((2, DIM - 1), np.float32), r"chunks must have shape \(n, 32\), got \(2, 31\)"),
        (1, _GOOD_POOLED, np.ones(DIM, np.float32), r"chunks must have shape \(n, 32\)"),
        (1, _GOOD_POOLED, np.ones((2, DIM), np.int64), "float array .* got dtype int64"),
        (1, _GOOD_POOLED, _GOOD_CHUNKS.tolist(), "numpy array .* got list"),
        (1, _GOOD_POOLED, np.full((2, DIM), np.nan, np.float32), "finite"),
        (1, _GOOD_POOLED, np.ones((109, DIM), np.float32), "109 non-zero rows, more than 108"),
        (1, np.zeros(DIM, np.float32), _GOOD_CHUNKS, "pooled is all zeros"),
    ],
)
def test_bad_page_raises(scratch, page, pooled, chunks, match):
    with pytest.raises(ValueError, match=match):
        scratch.upsert_page("doc", page, pooled, chunks)
    assert scratch.count() == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"query": np.ones(384, np.float32)}, r"query must have shape \(32,\), got \(384,\)"),
        ({"query": np.ones((1, DIM), np.float32)}, r"query must have shape \(32,\), got \(1, 32\)"),
        ({"query": np.zeros(DIM, np.float32)}, "non-zero"),
        ({"k": 0}, "k must be an int >= 1, got 0"),
        ({"k": 2.5}, "k must be an int >= 1, got 2.5"),
        ({"k": 5, "first_stage": 3}, "first_stage must be an int >= k=5"),
        ({"doc_ids": "doc-a"}, r"pass \['doc-a'\]"),
        ({"doc_ids": ["doc-a", 7]}, "doc_id must be a non-empty str, got 7"),
    ],
)
def test_bad_query_raises(scratch, kwargs, match):
    with pytest.raises(ValueError, match=match):
        scratch.search(**{"query": _GOOD_POOLED, **kwargs})


def test_path_and_url_together_or_neither_raise(tmp_path):
    with pytest.raises(ValueError, match="path=.*url=.*not both"):
        VisualIndex(path=tmp_path, url="http://localhost:6333")
    with pytest.raises(ValueError, match="path=.*url=.*neither"):
        VisualIndex()
    with pytest.raises(ValueError, match="api_key"):
        VisualIndex(path=tmp_path, api_key="secret")


def test_dead_url_raises_a_clear_connection_error_quickly():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    with pytest.raises(QdrantUnavailableError, match="Qdrant server is running") as info:
        VisualIndex(url=url)
    assert time.perf_counter() - t0 < 10
    assert isinstance(info.value, ConnectionError)
    assert url in str(info.value)


def test_folder_held_by_another_opener_raises(tmp_path):
    with VisualIndex(path=tmp_path, dim=DIM):
        with pytest.raises(VisualIndexLockedError, match="open in another process"):
            VisualIndex(path=tmp_path, dim=DIM)
    with VisualIndex(path=tmp_path, dim=DIM) as index:  # released on close
        assert index.count() == 0


def test_reopen_with_another_dim_raises(tmp_path):
    VisualIndex(path=tmp_path, dim=DIM).close()
    with pytest.raises(RuntimeError, match="dim 16"):
        VisualIndex(path=tmp_path, dim=16)


def test_closed_index_raises(tmp_path):
    index = VisualIndex(path=tmp_path, dim=DIM)
    index.close()
    index.close()
    with pytest.raises(RuntimeError, match="closed"):
        index.count()

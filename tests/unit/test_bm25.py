"""Parity of indexes.bm25 with rank-bm25's BM25Okapi (the reference the module documents): scores
of one document's pages equal a BM25Okapi built over those pages, to 1e-9.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from docrefrag.indexes.bm25 import BM25Index, tokenize

VOCAB = [f"w{i}" for i in range(30)]
COMMON = "ubiquitous"  # put in about 80% of the pages: df > N/2, so its raw idf is negative


def random_doc(rng: random.Random, doc_id: str, pages: int) -> list[tuple[str, int, int, str]]:
    """(doc_id, page, chunk, text) rows: 1-3 chunks a page, words from a small vocabulary."""
    rows = []
    for page in range(1, pages + 1):
        for chunk in range(rng.randint(1, 3)):
            words = rng.choices(VOCAB[: rng.randint(8, len(VOCAB))], k=rng.randint(1, 12))
            if chunk == 0 and rng.random() < 0.8:
                words.append(COMMON.upper() if rng.random() < 0.5 else COMMON)  # tokenize lowercases
            if rng.random() < 0.3:
                words += ["the", "of", "and"]  # stopwords: dropped on both sides
            rows.append((doc_id, page, chunk, " ".join(words)))
    return rows


def reference(rows: list[tuple[str, int, int, str]], doc_ids: set[str]) -> tuple[BM25Okapi, list[tuple[str, int]]]:
    """BM25Okapi over the pages of `doc_ids` (a page's chunks concatenated) and its page keys."""
    pages: dict[tuple[str, int], list[str]] = {}
    for doc_id, page, _, text in rows:
        if doc_id in doc_ids:
            pages.setdefault((doc_id, page), []).extend(tokenize(text))
    return BM25Okapi(list(pages.values())), list(pages)


def queries(rng: random.Random) -> list[str]:
    return [
        "w1",
        "w3 w3 w7",  # a repeated term counts twice
        "w2 nosuchterm w5",  # an unknown term adds nothing
        COMMON,  # only the floored idf
        f"{COMMON} w0 w0 {COMMON.upper()}",
        "the of and",  # only stopwords: all zeros
        " ".join(rng.choices(VOCAB, k=6)),
        " ".join(rng.choices(VOCAB + ["zzz", COMMON], k=10)),
    ]


def scores_by_key(index: BM25Index, query: str, doc_ids) -> dict[tuple[str, int], float]:
    scored = index.page_scores(query, doc_ids)
    positions, scores = scored.scope, scored.scores
    assert len(positions) == len(scores)
    return {index.page_keys[p]: s for p, s in zip(positions, scores, strict=True)}


def assert_parity(index: BM25Index, rows, doc_ids: set[str], query: str, scope) -> None:
    bm, keys = reference(rows, doc_ids)
    expected = bm.get_scores(tokenize(query))
    got = scores_by_key(index, query, scope)
    assert list(got) == keys
    np.testing.assert_allclose([got[k] for k in keys], expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_one_document_matches_rank_bm25(seed):
    rng = random.Random(seed)
    rows = random_doc(rng, "doc", rng.randint(3, 12))
    index = BM25Index.build(rows)
    bm, _ = reference(rows, {"doc"})
    df = sum(COMMON in set(d) for d in bm.doc_freqs)
    assert df > bm.corpus_size / 2 or bm.corpus_size < 4  # the negative-idf floor is exercised
    for query in queries(rng):
        assert_parity(index, rows, {"doc"}, query, ["doc"])
        assert_parity(index, rows, {"doc"}, query, None)


def test_negative_idf_is_floored_like_rank_bm25():
    rows = [("d", p, 0, f"{COMMON} w{p}") for p in range(1, 6)] + [("d", 6, 0, "w9 w9")]
    index = BM25Index.build(rows)
    bm, _ = reference(rows, {"d"})
    assert bm.idf[COMMON] == pytest.approx(bm.epsilon * bm.average_idf) and bm.idf[COMMON] > 0
    assert_parity(index, rows, {"d"}, COMMON, ["d"])
    assert_parity(index, rows, {"d"}, f"{COMMON} w9", ["d"])


@pytest.mark.parametrize("seed", range(4))
def test_scope_restricts_the_statistics(seed):
    rng = random.Random(100 + seed)
    a = random_doc(rng, "A", rng.randint(3, 8))
    b = [(d, p, c, t + " w29 w29 w28") for d, p, c, t in random_doc(rng, "B", rng.randint(3, 8))]
    rows = a + b
    index = BM25Index.build(rows)
    for query in [*queries(rng), "w29 w28 w1"]:
        assert_parity(index, rows, {"A"}, query, ["A"])
        assert_parity(index, rows, {"B"}, query, ["B"])
        assert_parity(index, rows, {"A", "B"}, query, None)
        assert_parity(index, rows, {"A", "B"}, query, ["A", "B"])
    # the statistics really differ: A's pages score otherwise within the whole store
    alone = scores_by_key(index, "w29 w1", ["A"])
    together = scores_by_key(index, "w29 w1", None)
    assert any(abs(alone[k] - together[k]) > 1e-6 for k in alone)
    assert index.page_scores("w1", ["nosuchdoc"]).scope.size == 0
    assert index.search("w1", k=3, doc_ids=["nosuchdoc"]) == []


def test_save_and_load_give_identical_scores(tmp_path: Path):
    rng = random.Random(7)
    rows = random_doc(rng, "A", 6) + random_doc(rng, "B", 5)
    index = BM25Index.build(rows)
    path = tmp_path / "bm25.npz"
    index.save(path, generation=3)
    assert path.is_file() and not list(tmp_path.glob("*.tmp*"))
    assert BM25Index.load(path, generation=4) is None  # written for another generation: not used
    path.with_name("broken.npz").write_bytes(b"PK\x03\x04 damaged")
    assert BM25Index.load(path.with_name("broken.npz"), generation=3) is None
    loaded = BM25Index.load(path, generation=3)
    assert (loaded.rows, loaded.vocab, loaded.page_keys) == (index.rows, index.vocab, index.page_keys)
    for query in queries(rng):
        for scope in (None, ["A"], ["B"]):
            p0, s0 = index.page_scores(query, scope).scope, index.page_scores(query, scope).scores
            p1, s1 = loaded.page_scores(query, scope).scope, loaded.page_scores(query, scope).scores
            np.testing.assert_array_equal(p0, p1)
            np.testing.assert_array_equal(s0, s1)
            assert loaded.search(query, k=4, doc_ids=scope) == index.search(query, k=4, doc_ids=scope)


def test_empty_index():
    index = BM25Index.build([])
    assert len(index) == 0 and index.search("anything") == []


def chunk_score(bm: BM25Okapi, tokens: list[str], query: list[str]) -> float:
    """BM25Okapi's formula for one chunk with the scope's idf and avgdl and the chunk's length."""
    tf = Counter(tokens)
    norm = bm.k1 * (1 - bm.b + bm.b * len(tokens) / bm.avgdl)
    return sum((bm.idf.get(q) or 0.0) * tf[q] * (bm.k1 + 1) / (tf[q] + norm) for q in query)


@pytest.mark.parametrize("seed", range(4))
def test_search_returns_the_best_chunk_of_each_page(seed):
    rng = random.Random(200 + seed)
    rows = random_doc(rng, "A", 8) + random_doc(rng, "B", 6)
    index = BM25Index.build(rows)
    for query in queries(rng)[:3] + queries(rng)[6:]:
        for scope, docs in ((["A"], {"A"}), (None, {"A", "B"})):
            bm, keys = reference(rows, docs)
            expected = dict(zip(keys, bm.get_scores(tokenize(query)), strict=True))
            hits = index.search(query, k=5, doc_ids=scope)
            assert len(hits) == min(5, len(keys))
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            best_rest = max([s for k, s in expected.items() if k not in {(h.doc_id, h.page) for h in hits}],
                            default=-np.inf)
            for hit in hits:
                assert hit.score == pytest.approx(expected[(hit.doc_id, hit.page)], abs=1e-9)
                assert hit.score >= best_rest - 1e-9
                chunks = [(c, tokenize(t)) for d, p, c, t in rows if (d, p) == (hit.doc_id, hit.page)]
                scores = [chunk_score(bm, toks, tokenize(query)) for _, toks in chunks]
                assert hit.chunk == chunks[int(np.argmax(scores))][0], (hit, scores)


def test_best_chunk_is_the_one_holding_the_terms():
    rows = [
        ("d", 1, 0, "w1 w2 w3"), ("d", 1, 1, "harbour crane w4"), ("d", 1, 2, "w5 w6"),
        ("d", 2, 0, "harbour w7"), ("d", 2, 1, "w8 w9 w10 w11"),
        ("d", 3, 0, "w12 w13"),
    ]
    hits = BM25Index.build(rows).search("harbour crane", k=3)
    assert [(h.page, h.chunk) for h in hits[:2]] == [(1, 1), (2, 0)]
    assert hits[2].page == 3 and hits[2].score == 0.0

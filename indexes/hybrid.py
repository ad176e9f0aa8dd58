"""Hybrid page search over a store: BM25 over page text + the visual index's page score (best
region + pooled page vector), fused; each branch weighed also by its health on the page's document
(indexes/health.py), kept in the store (measured at ingest, or here for a document that lacks it)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from docrefrag.indexes.bm25 import ScopeScores
from docrefrag.indexes.fusion import DEFAULT_METHOD, Diagnostics, FusionMethod, fuse_with_diagnostics
from docrefrag.indexes.health import of_documents
from docrefrag.indexes.store import Store

if TYPE_CHECKING:
    from docrefrag.core.text_embedder import TextEmbedder

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hit:
    """One retrieved page: 1-based page number, a score per signal, and its best region."""

    doc_id: str
    page: int
    fused: float
    sparse: float | None  # BM25 score (None: not among the sparse candidates)
    dense: float | None  # the visual index's page score (None: not among the dense candidates)
    rerank: float | None = None
    bbox: tuple[float, float, float, float] | None = None  # PDF points, origin top-left
    snippet: str = ""


@dataclass(frozen=True)
class Candidates:
    scope: list[str]  # the ready documents searched
    keys: list[tuple[str, int]]  # (doc_id, page) of each candidate
    sparse: np.ndarray  # (n,) BM25 score, NaN where the page is not among the sparse candidates
    dense: np.ndarray  # (n,) visual page score, NaN where the page is not among the dense candidates
    bm25: ScopeScores | None  # the BM25 statistics of the query (for each hit's best chunk)
    health: np.ndarray | None = None  # (n, 2) the branches' health on each candidate's document (indexes/health.py)

    def fuse(self, method: FusionMethod = DEFAULT_METHOD, **params: float) -> tuple[np.ndarray, Diagnostics]:
        """The candidates' fused scores and the branches' agreement (indexes/fusion.py)."""
        return fuse_with_diagnostics(self.sparse, self.dense, method, self.keys, health=self.health, **params)

    def ranked(self, method: FusionMethod = DEFAULT_METHOD) -> list[tuple[str, int]]:
        """The candidates' (doc_id, page), best first by the fused score."""
        return [self.keys[i] for i in best_first(self.fuse(method)[0])]


def best_first(scores: np.ndarray) -> np.ndarray:
    """Indices of `scores` from the highest down; ties keep their order."""
    return np.argsort(-np.asarray(scores), kind="stable")


class HybridSearcher:
    """Each branch proposes `n_candidates` pages; the union is fused and the top k returned."""

    def __init__(self, store: Store, embedder: TextEmbedder, n_candidates: int = 50) -> None:
        self.store, self.embedder, self.n_candidates = store, embedder, n_candidates

    def candidates(self, query: str, doc_ids: Sequence[str] | None = None, k: int = 0,
                   dense_query: str | None = None) -> Candidates:
        """Union of each branch's top `max(n_candidates, k)` pages with both branch scores and the
        branches' health on each page's document (measured now for documents that lack it).

        `query` feeds BM25; the dense branch embeds `dense_query` if given (e.g. the question plus a
        hypothetical answer passage), else `query`.
        """
        if not query.strip():
            raise ValueError("the query is empty; pass some words to search for")
        ready = set(self.store.catalog.ready_ids())
        scope = sorted(ready) if doc_ids is None else [d for d in doc_ids if d in ready]
        if not scope:
            return Candidates(scope, [], np.zeros(0), np.zeros(0), None, np.zeros((0, 2)))
        self.store.visual  # noqa: B018 (opened first: if another process holds the index, fail before any work)
        query_vec = self.embedder.embed_queries([dense_query or query])[0]
        keys, sparse, dense, scored = self.branch_scores(query, query_vec, scope, max(self.n_candidates, k))
        health = of_documents(self, sorted({doc for doc, _ in keys}))
        by_page = np.array([[health[doc].sparse, health[doc].dense] for doc, _ in keys]).reshape(-1, 2)
        return Candidates(scope, keys, sparse, dense, scored, by_page)

    def branch_scores(self, query: str, query_vec: np.ndarray, scope: Sequence[str], n: int):
        """Each branch's top n pages of `scope`: their keys, BM25 and visual scores (NaN: not proposed)."""
        visual, bm25 = self.store.visual, self.store.bm25.index()
        scored = bm25.page_scores(query, scope)
        top = best_first(scored.scores)[:n]
        sparse_by_key = {bm25.page_keys[scored.scope[i]]: float(scored.scores[i]) for i in top}
        dense_by_key = {(h.doc_id, h.page): h.score for h in visual.search(query_vec, k=n, doc_ids=scope)}
        keys = list(dict.fromkeys([*sparse_by_key, *dense_by_key]))
        sparse = np.array([sparse_by_key.get(key, np.nan) for key in keys])  # (n_candidates,)
        dense = np.array([dense_by_key.get(key, np.nan) for key in keys])  # (n_candidates,)
        return keys, sparse, dense, scored

    def search(self, query: str, k: int = 5, doc_ids: Sequence[str] | None = None,
               method: FusionMethod = DEFAULT_METHOD) -> list[Hit]:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        cands = self.candidates(query, doc_ids, k)
        return self.to_hits(cands, cands.fuse(method)[0], k)

    def ranked_pages(self, query: str, k: int, method: FusionMethod = DEFAULT_METHOD) -> list[tuple[str, int]]:
        """(doc_id, page) of the pages most similar to `query` in the whole store (at least k when it has
        them), best first: the hard negatives of docrefrag.core.longrag's noisy sequences."""
        return self.candidates(query, None, k).ranked(method)

    def to_hits(self, cands: Candidates, fused: np.ndarray, k: int) -> list[Hit]:
        """The top-k candidates by `fused`, each with its best BM25 chunk as region and snippet."""
        order = best_first(fused)[:k]
        chosen = [cands.keys[i] for i in order]
        position = self.store.bm25.index().position
        best = (self.store.bm25.index().best_chunks(cands.bm25,
                                              np.array([position[key] for key in chosen if key in position]))
                if cands.bm25 is not None else {})
        hits = []
        for i, key in zip(order, chosen, strict=True):
            chunk = self.store.pages.chunk(*key, best[position[key]]) if position.get(key) in best else None
            hits.append(Hit(key[0], key[1], float(fused[i]), _opt(cands.sparse[i]), _opt(cands.dense[i]),
                            bbox=chunk.bbox if chunk else None, snippet=chunk.text if chunk else ""))
        return hits


def _opt(x: float) -> float | None:
    return None if np.isnan(x) else float(x)

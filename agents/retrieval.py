"""The retrieval agent: a plan -> ranked pages, through the hybrid searcher.

Each sub-query is searched on both branches: BM25 gets the sub-query plus the plan's keywords and
anchors, the dense branch the sub-query plus the HyDE passage. Per sub-query the branches are
fused (consistency-penalised fusion by default); across sub-queries the page lists are merged by
reciprocal rank, so a page needed by any sub-query can surface.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from docrefrag.agents.schemas import Plan
from docrefrag.indexes.fusion import RRF_K, FusionMethod
from docrefrag.indexes.hybrid import Hit, HybridSearcher

logger = logging.getLogger(__name__)

SEARCH_DEPTH = 10  # pages a round of the ask graph retrieves at the least: the ones the rerank step reorders


@dataclass(frozen=True)
class QueryRun:
    sparse_query: str
    dense_query: str
    hits: list[Hit]
    top_overlap: float  # share of the two branches' top-5 pages in common (low: the branches disagree)
    query_disagreement: float  # (1 - Spearman rho) / 2 of the branches over the candidates
    weight_sparse: float  # the fusion's share of BM25 for this query
    sparse_off: int = 0  # candidates on documents where BM25's health switched it off (indexes/health.py)
    dense_off: int = 0  # candidates on documents where the dense branch's health switched it off


def search_plan(plan: Plan, question: str, searcher: HybridSearcher, doc_ids: Sequence[str] | None, k: int,
                method: FusionMethod) -> tuple[list[Hit], list[QueryRun]]:
    runs: list[QueryRun] = []
    merged: dict[tuple[str, int], float] = {}
    best_hit: dict[tuple[str, int], Hit] = {}
    extra = " ".join([*plan.keywords, *plan.visual_anchors])
    for query in plan.sub_queries or [question]:
        sparse_query = f"{query} {extra}".strip()
        dense_query = f"{query} {plan.hyde}".strip()
        cands = searcher.candidates(sparse_query, doc_ids, k=k, dense_query=dense_query)
        if not cands.keys:
            continue
        fused, diag = cands.fuse(method)
        hits = searcher.to_hits(cands, fused, max(k * 2, 10))
        runs.append(QueryRun(sparse_query, dense_query, hits[:k], diag.top_overlap, diag.query_disagreement,
                             diag.weight_sparse, diag.sparse_off, diag.dense_off))
        for rank, hit in enumerate(hits):
            key = (hit.doc_id, hit.page)
            merged[key] = merged.get(key, 0.0) + 1.0 / (RRF_K + rank + 1)
            best_hit.setdefault(key, hit)
    ranked = sorted(merged, key=lambda key: -merged[key])[:k]
    return [best_hit[key] for key in ranked], runs

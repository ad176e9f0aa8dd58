"""The graph's state: ids, text and scores only (no tensors, images or handles), so any LangGraph
checkpointer can persist it and a run can be resumed or inspected."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict


class AskState(TypedDict, total=False):
    question: str
    doc_ids: list[str] | None  # None: the whole store
    plan: dict  # agents.schemas.Plan as a dict
    hits: list[dict]  # pages retrieved this round: doc_id, page, fused, sparse, dense, rerank, bbox, snippet
    read: list[dict]  # pages given to the answer agent: doc_id, page, text
    evidence: list[dict]  # elements the evidence controller opened (evidence "graph"): doc_id, page, element,
    # kind, bbox, text, in reading order
    answer: str
    claims: list[dict]  # agents.schemas.Claim as dicts
    verdict: dict  # agents.schemas.Verdict as a dict
    best: dict  # the best-validated round so far: answer, claims, verdict, round (the run returns it)
    query_disagreement: float  # of the last search's first sub-query (round 1: the question): (1 - Spearman rho) / 2
    enriched: bool  # the enrich node has run (it runs at most once)
    round: int  # 1-based retrieval round
    tokens: int  # LLM output tokens spent so far
    started_at: float  # time.time() at the start of the run
    ttft_s: float | None  # seconds until the answer's first (and only) generation finished; None before
    trace: Annotated[list[dict], operator.add]  # one entry per node run, appended

"""Experience memory (DocTrace): a validated answer's plan is kept in the store, and a new, similar
question starts from it.

A run whose answer the validator supported (confidence >= AskConfig.validation.tau, not "Not answerable") writes
one plan into the store's memory at its end (`remember`, from graph/ask.py): the question and its
query embedding, the documents it was asked over (all the ready ones for a whole-store question), the
plan's final sub-queries, the evidence it cited (the pages, and the sections: the headings above the
cited elements in the evidence graph), the graph nodes it ran, its rounds and its validator confidence.

The plan node recalls (`seed_plan`) the RECALL_K stored plans nearest the new question at cosine >=
SIMILARITY, of those over a document of its scope (a whole-store question sees all). 0.8: with the
default embedder a paraphrase scored 0.86-0.99, another operator's count 0.59, other topics of the
same report 0.02-0.31 (but another year 0.99: numbers barely move it). Their sub-queries join the
plan's, deduplicated (so decompose="disagreement" takes it as decomposed), and the trace gets {"node":
"memory", "recalled": [{id, similarity, question}], "sub_queries": added, "hints": their cited pages}.
Memory only seeds the search: the answer is read from, and cited to, the pages retrieved in this run.
AskConfig.search.memory=False (`--no-memory`) neither recalls nor stores; retiring a document removes the plans
over no other. The rows and their queries are the store's part `store.memory` (indexes/memory_table.py);
`docrefrag memory list|clear` shows or empties the memory.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from docrefrag.agents.schemas import Plan
from docrefrag.agents.tools import node_id
from docrefrag.core.chunking import box_overlap
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.evidence_graph import ROOT
from docrefrag.indexes.memory_table import StoredPlan

if TYPE_CHECKING:
    from docrefrag.graph.ask import AskResult
    from docrefrag.graph.context import AskContext
    from docrefrag.indexes.store import Store

logger = logging.getLogger(__name__)

SIMILARITY = 0.8
RECALL_K = 3


def _embed(embedder, question: str) -> np.ndarray:
    return np.asarray(embedder.embed_queries([question])[0], dtype=np.float32)


def recall(store: Store, embedder, question: str, doc_ids: list[str] | None) -> list[tuple[StoredPlan, float]]:
    """(plan, cosine) of the RECALL_K stored plans nearest `question` at SIMILARITY or above, nearest first,
    of those asked over a document of `doc_ids` (None: the whole store, every plan)."""
    return store.memory.nearest(_embed(embedder, question), SIMILARITY, RECALL_K, doc_ids)


def seed_plan(plan: Plan, question: str, doc_ids: list[str] | None, ctx: AskContext) -> tuple[Plan, list[dict]]:
    """The plan with the recalled plans' sub-queries added, and its trace entry ([] when memory is off or
    recalls nothing)."""
    if not ctx.config.search.memory:
        return plan, []
    recalled = recall(ctx.store, ctx.searcher.embedder, question, doc_ids)
    if not recalled:
        return plan, []
    queries = plan.sub_queries or [question]
    seen = {q.strip().casefold() for q in queries}
    added = []
    for stored, _ in recalled:
        for q in stored.sub_queries:
            if q.strip().casefold() not in seen:
                seen.add(q.strip().casefold())
                added.append(q)
    scope = set(doc_ids if doc_ids is not None else ctx.store.catalog.ready_ids())
    hints = list(dict.fromkeys((p["doc_id"], p["page"]) for stored, _ in recalled
                               for p in stored.evidence["pages"] if p["doc_id"] in scope))
    entry = {"node": "memory", "recalled": [{"id": s.id, "similarity": round(sim, 4), "question": s.question}
                                            for s, sim in recalled],
             "sub_queries": added, "hints": [{"doc_id": d, "page": p} for d, p in hints]}
    return plan.model_copy(update={"sub_queries": [*queries, *added]}), [entry]


def remember(store: Store, embedder, result: AskResult, doc_ids: list[str] | None, plan: dict) -> int | None:
    """Store the plan of a validated run; its id (None when the catalog cannot be written now: a busy or
    read-only store loses the plan, never the answer)."""
    pages = list(dict.fromkeys((c["doc_id"], c["page"]) for claim in result.claims for c in claim["citations"]))
    evidence = {"pages": [{"doc_id": d, "page": p} for d, p in pages],
                "sections": _sections(store, [c for claim in result.claims for c in claim["citations"]])}
    try:
        return store.memory.add(result.question, _embed(embedder, result.question),
                                doc_ids if doc_ids is not None else store.catalog.ready_ids(),
                                plan.get("sub_queries") or [result.question], evidence,
                                list(dict.fromkeys(e["node"] for e in result.trace)), result.rounds, result.confidence)
    except StoreError as e:
        logger.warning("the answer's plan was not stored in the experience memory: %s", e)
        return None


def _sections(store: Store, citations: list[dict]) -> list[dict]:
    """The section heading above the element each citation's region falls on most (none for a citation
    without a region, or one under no heading)."""
    found: dict[tuple[str, tuple[int, int]], str] = {}
    for c in citations:
        if c.get("bbox") is None:
            continue
        graph = store.graphs.get(c["doc_id"])
        on_page = [n for n in graph.nodes if n[0] == c["page"] and n[1] > 0]
        overlap = {n: box_overlap(tuple(c["bbox"]), graph.nodes[n].bbox) for n in on_page}
        best = max(overlap, key=overlap.get, default=None)
        if best is not None and overlap[best] > 0 and (heading := graph.section_of(best)) != ROOT:
            found.setdefault((c["doc_id"], heading), graph.nodes[heading].text)
    return [{"doc_id": d, "id": node_id(n), "text": text} for (d, n), text in found.items()]

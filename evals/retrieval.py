"""Retrieval-only evaluation: rank the pages of each question's own document, per fusion method.

One candidate set per question (both branches scored once), fused by every method, so the methods
are compared on identical inputs. Per-question rows go to a JSONL file that a rerun resumes from.

With a planner, each question is planned once (the LLM calls are the cost) and searched with every
part of the plan switched on and off: "question" (no planner), "rules" (the rule-extracted keywords
and anchors), and with the HyDE passage and/or the sub-queries when they were asked for; each of
those also as "<plan>-on-disagreement", what the ask graph does in the mode "disagreement" (HyDE's
default): the rules plan, with the LLM parts only when the rules plan's search found the branches
disagreeing (`agents.planner.disagrees`, the graph's gate for a question asked of its one document).
One run thus gives the whole planner ablation on the same plans; rows are named "<plan>/<method>";
the last plan (every part asked for, on disagreement) is the one reranked.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from docrefrag.agents.planner import DISAGREEMENT, disagrees
from docrefrag.agents.rerank import Reranker, reorder
from docrefrag.agents.retrieval import SEARCH_DEPTH, search_plan
from docrefrag.agents.schemas import Plan
from docrefrag.evals.datasets import Question
from docrefrag.evals.jsonl import load_rows
from docrefrag.evals.metrics import KS, mean_metrics, retrieval_metrics
from docrefrag.indexes.hybrid import Candidates, Hit, HybridSearcher
from docrefrag.indexes.store import Store

logger = logging.getLogger(__name__)

METHODS = ("sparse", "dense", "rrf", "sum", "consistency")
ON_DISAGREEMENT = "-on-disagreement"  # suffix of a variant that is the rules plan unless the branches disagree


def plan_variants(plan: Plan, question: str, hyde: bool, decompose: bool) -> dict[str, Plan]:
    """The plans a planner run compares: the full `plan` and the plans without its LLM parts; each
    "<variant>-on-disagreement" is the rules plan here, replaced by <variant> where the branches disagree."""
    bare = Plan(sub_queries=[question])
    rules = plan.model_copy(update={"sub_queries": [question], "hyde": ""})
    variants = {"question": bare, "rules": rules}
    if hyde:
        variants["hyde"] = rules.model_copy(update={"hyde": plan.hyde})
    if decompose:
        variants["decomposition"] = plan.model_copy(update={"hyde": ""})
    if hyde and decompose:
        variants["hyde+decomposition"] = plan
    return {**variants, **{f"{v}{ON_DISAGREEMENT}": rules for v in list(variants)[2:]}}


class _QuestionSearcher:
    """The searcher for one question's plans: each distinct (BM25 query, dense query) is searched
    once, however many fusion methods and plan variants reuse it."""

    def __init__(self, searcher: HybridSearcher) -> None:
        self._searcher = searcher
        self._candidates: dict[tuple, Candidates] = {}

    def candidates(self, query: str, doc_ids: Sequence[str] | None = None, k: int = 0,
                   dense_query: str | None = None) -> Candidates:
        key = (query, tuple(doc_ids or ()), k, dense_query)
        if key not in self._candidates:
            self._candidates[key] = self._searcher.candidates(query, doc_ids, k, dense_query)
        return self._candidates[key]

    def to_hits(self, cands: Candidates, fused: np.ndarray, k: int) -> list[Hit]:
        return self._searcher.to_hits(cands, fused, k)


@dataclass
class RetrievalReport:
    methods: dict[str, dict[str, float]]  # method -> mean metric
    questions: int  # questions scored (answerable, with evidence pages, document present)
    skipped: dict[str, int]
    latency_ms: dict[str, float]  # p50, p95
    latencies_ms: list[float]


def evaluate_retrieval(store: Store, searcher: HybridSearcher, questions: Sequence[Question], doc_ids: dict[str, str],
                       out: Path, methods: Sequence[str] = METHODS, show_progress: bool = True,
                       planner: Callable[[str], Plan] | None = None, hyde: bool = False, decompose: bool = False,
                       reranker: Reranker | None = None, settings: dict | None = None,
                       disagreement: float = DISAGREEMENT) -> RetrievalReport:
    """`doc_ids` maps a benchmark document name to its id in `store`. With a `planner` (which writes
    the HyDE passage and/or the sub-queries, as `hyde` and `decompose` say), each question is also
    searched as the ask graph's retrieve node does, once per `plan_variants`; the plan is kept in the
    row; `disagreement` is the ask settings' gate (AskConfig.search.disagreement). With a `reranker`, the
    consistency-fused top SEARCH_DEPTH pages (of the last plan: what the ask graph reranks) are
    reordered by it as one more method, "reranked" (the pages below the depth keep their fused order),
    and its time per page is recorded."""
    fused_methods = list(methods)
    base = "consistency"
    if planner is not None:
        variants = list(plan_variants(Plan(), "", hyde, decompose))
        methods = [f"{v}/{m}" for v in variants for m in fused_methods]
        base = f"{variants[-1]}/consistency"
    if reranker is not None:
        methods = [*methods, "reranked"]
    # other methods: redone
    done = {qid: r for qid, r in load_rows(out, settings).items() if all(m in r for m in methods)}
    skipped = {"no_evidence_or_unanswerable": 0, "document_missing": 0}
    rows = list(done.values())
    with open(out, "a") as f:
        for q in tqdm(questions, desc="retrieval", unit="q", disable=not show_progress):
            if not q.evidence_pages or not q.answerable:
                skipped["no_evidence_or_unanswerable"] += 1
                continue
            if q.doc_name not in doc_ids:
                skipped["document_missing"] += 1
                continue
            if q.qid in done:
                continue
            start = time.perf_counter()
            scope = [doc_ids[q.doc_name]]
            row = {"qid": q.qid, "doc": q.doc_name, "evidence": list(q.evidence_pages)}
            if planner is None:
                cands = searcher.candidates(q.question, scope, k=max(KS))
                ranking = {m: [page for _, page in cands.ranked(m)] for m in fused_methods}
            else:
                plan = planner(q.question)
                row["plan"] = plan.model_dump()
                cached = _QuestionSearcher(searcher)
                ranking = {}
                plans = plan_variants(plan, q.question, hyde, decompose)
                # as the ask graph: the LLM parts only where the rules plan's branches disagree
                runs = search_plan(plans["rules"], q.question, cached, scope, max(KS), "consistency")[1]
                row["query_disagreement"] = runs[0].query_disagreement if runs else 0.0
                if disagrees(row["query_disagreement"], disagreement):
                    plans.update({v: plans[v.removesuffix(ON_DISAGREEMENT)] for v in plans
                                  if v.endswith(ON_DISAGREEMENT)})
                # the last plan first: planning plus its search is the ask graph's retrieve latency
                for v, p in reversed(plans.items()):
                    for m in fused_methods:
                        ranking[f"{v}/{m}"] = [h.page for h in search_plan(p, q.question, cached, scope, max(KS), m)[0]]
                    if f"{v}/consistency" == base:
                        row["latency_ms"] = (time.perf_counter() - start) * 1000
            row.setdefault("latency_ms", (time.perf_counter() - start) * 1000)
            if reranker is not None:
                top = ranking[base][:SEARCH_DEPTH]  # as many pages as the ask graph's rerank step reorders
                t0 = time.perf_counter()
                order, scores = reorder(reranker, q.question, [(scope[0], page) for page in top])
                row["rerank_ms_per_page"] = (time.perf_counter() - t0) * 1000 / max(len(top), 1)
                row["rerank_pages"], row["rerank_scores"] = top, [round(s, 5) for s in scores]  # fused order
                ranking["reranked"] = [top[i] for i in order] + ranking[base][SEARCH_DEPTH:]
            for method, ranked in ranking.items():
                row[method] = {"ranked": ranked[: max(KS)], **retrieval_metrics(ranked[: max(KS)], q.evidence_pages)}
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows.append(row)
    scored = [r for r in rows if r["qid"] in {q.qid for q in questions}]
    per_method = {m: mean_metrics([{k: v for k, v in r[m].items() if k != "ranked"} for r in scored]) for m in methods}
    lat = np.array([r["latency_ms"] for r in scored]) if scored else np.zeros(1)
    latency = {"p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95))}
    if reranker is not None and scored:
        latency["rerank_ms_per_page_mean"] = float(np.mean([r["rerank_ms_per_page"] for r in scored]))
    return RetrievalReport(per_method, len(scored), skipped, latency, [float(x) for x in lat])


def markdown_table(report: RetrievalReport, keys: Sequence[str] = ("recall@1", "recall@3", "recall@5", "recall@10",
                                                                    "ndcg@5", "mrr@5")) -> str:
    lines = ["| method | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for method, metrics in report.methods.items():
        lines.append(f"| {method} | " + " | ".join(f"{metrics[k]:.3f}" for k in keys) + " |")
    return "\n".join(lines)

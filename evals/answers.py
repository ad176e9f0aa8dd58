"""End-to-end evaluation: each question goes through the ask graph on its own document; the answer
is scored with the benchmark's official rules (evals.scoring).

Answer extraction: the official protocol has a chat model extract a short answer from a free-form
response (`evals.scoring.EXTRACTION_PROMPT`). Our answer agent is prompted for the short answer
itself, so with no extraction model configured the short answer is scored directly, and the
report says so (`extraction: none`).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import numpy as np
from langchain_core.language_models import BaseChatModel
from tqdm import tqdm

from evals.datasets import Question, mmlongbench_format
from evals.jsonl import load_rows
from evals.scoring import longdocurl_aggregate, longdocurl_score, mmlongbench_aggregate, mmlongbench_score
from graph.context import AskConfig
from graph.run import run_ask
from indexes.hybrid import HybridSearcher
from indexes.store import Store

logger = logging.getLogger(__name__)


def score(q: Question, pred: str) -> float:
    if q.benchmark == "longdocurl":
        return longdocurl_score(q.answer, pred, q.answer_format)
    return mmlongbench_score(q.answer, pred, mmlongbench_format(q))


def evaluate_answers(store: Store, searcher: HybridSearcher, llm: BaseChatModel, questions: Sequence[Question],
                     doc_ids: dict[str, str], out: Path, config: AskConfig | None = None,
                     show_progress: bool = True, reader=None) -> list[dict]:
    """Per-question rows (resumed from `out`, a JSONL file), one graph run per new question."""
    rows = load_rows(out)
    with open(out, "a") as f:
        for q in tqdm(questions, desc="answering", unit="q", disable=not show_progress):
            if q.qid in rows or q.doc_name not in doc_ids:
                continue
            result = run_ask(store, searcher, llm, q.question, [doc_ids[q.doc_name]], config,
                             checkpoints=out.with_suffix(".checkpoints.sqlite"),
                             thread_id=f"{q.qid}-{uuid.uuid4().hex[:8]}", reader=reader)  # a fresh thread: nothing carried over
            retrieved = next((e["hits"] for e in result.trace if e["node"] == "retrieve"), [])
            row = {"qid": q.qid, "doc": q.doc_name, "question": q.question, "answer": q.answer,
                   "answer_format": q.answer_format, "pred": result.answer, "score": score(q, result.answer),
                   "evidence_pages": list(q.evidence_pages), "evidence_sources": list(q.evidence_sources),
                   "doc_type": q.doc_type, "task_tag": q.task, "retrieved": [h["page"] for h in retrieved],
                   "cited": [c["page"] for claim in result.claims for c in claim["citations"]],
                   "confidence": result.confidence, "rounds": result.rounds, "seconds": result.seconds,
                   "ttft_s": result.ttft_s, "tokens": result.tokens}
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows[q.qid] = row
    wanted = {q.qid for q in questions}
    return [r for r in rows.values() if r["qid"] in wanted]


def summarise(benchmark: str, rows: list[dict]) -> dict:
    if not rows:
        return {"questions": 0}
    summary = (longdocurl_aggregate(rows) if benchmark == "longdocurl" else mmlongbench_aggregate(rows))
    seconds = np.array([r["seconds"] for r in rows])
    ttft = np.array([r["ttft_s"] for r in rows])
    hit = [bool(set(r["retrieved"][:5]) & set(r["evidence_pages"])) for r in rows if r["evidence_pages"]]
    return {"questions": len(rows), "extraction": "none (the answer agent's short answer is scored directly)",
            **asdict(summary),
            "evidence_in_top5": float(np.mean(hit)) if hit else None,
            "latency_s": {"p50": float(np.percentile(seconds, 50)), "p95": float(np.percentile(seconds, 95))},
            "ttft_s": {"p50": float(np.percentile(ttft, 50))},
            "tokens_mean": float(np.mean([r["tokens"] for r in rows])),
            "rounds_mean": float(np.mean([r["rounds"] for r in rows]))}

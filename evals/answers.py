"""End-to-end evaluation: each question goes through the ask graph on its own document; the answer
is scored with the benchmark's official rules (evals.score_mmlongbench, evals.score_longdocurl).

Answer extraction, MMLongBench-Doc's two-step protocol: with an `extractor` chat model, the
benchmark's extraction prompt (`docrefrag.evals.extraction.EXTRACTION_PROMPT`, user turn) and the question with
the system's free-form answer (a prefilled assistant turn that the model continues) give
"Extracted answer: ... / Answer format: ...", and the extracted answer is what is scored (an
unparseable extraction scores 0, as upstream). Our answer agent is prompted for the short answer
itself, so with no extractor the short answer is scored directly, and the report says so.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI
from tqdm import tqdm

from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.llm import LocalChatModel
from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.evals.datasets import Question, mmlongbench_format
from docrefrag.evals.extraction import extraction_messages, parse_extraction
from docrefrag.evals.jsonl import load_rows
from docrefrag.evals.score_longdocurl import longdocurl_aggregate, longdocurl_prediction, longdocurl_score
from docrefrag.evals.score_mmlongbench import mmlongbench_aggregate, mmlongbench_score
from docrefrag.graph.context import AskConfig
from docrefrag.graph.run import run_ask
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

logger = logging.getLogger(__name__)


EXTRACTION_MAX_TOKENS = 256  # upstream's max_tokens for the extractor (gpt-4o, temperature 0)


def extract_answer(extractor: BaseChatModel, question: str, response: str) -> tuple[str | None, str | None, str]:
    """(answer, answer format, the extractor's raw reply) under the official extraction protocol."""
    (user, prefill) = extraction_messages(question, response)
    messages = [HumanMessage(user["content"]), AIMessage(prefill["content"])]
    if isinstance(extractor, LocalChatModel):
        extractor = extractor.bind(max_new_tokens=EXTRACTION_MAX_TOKENS)
    elif isinstance(extractor, ChatOpenAI):
        extractor = extractor.bind(max_tokens=EXTRACTION_MAX_TOKENS, temperature=0)
    reply = invoke_llm(extractor, messages).text
    answer, answer_format = parse_extraction(reply)
    return answer, answer_format, reply


def score(q: Question, pred: str | None) -> float:
    return _score(q.benchmark, q.answer, pred, q.answer_format)


def _score(benchmark: str, answer: str, pred: str | None, answer_format: str) -> float:
    if benchmark == "longdocurl":
        return longdocurl_score(answer, longdocurl_prediction(pred), answer_format)
    return mmlongbench_score(answer, pred, mmlongbench_format(answer_format))


def first_round_hits(trace: list[dict]) -> list[dict]:
    """The pages the first answer was chosen from: the last search before the first rerank (after
    the enrich node, the second search of round 1)."""
    hits: list[dict] = []
    for entry in trace:
        if entry["node"] == "rerank":
            break
        if entry["node"] == "retrieve":
            hits = entry["hits"]
    return hits


def evaluate_answers(store: Store, searcher: HybridSearcher, llm: BaseChatModel, questions: Sequence[Question],
                     doc_ids: dict[str, str], out: Path, config: AskConfig | None = None,
                     show_progress: bool = True, reader=None, extractor: BaseChatModel | None = None,
                     settings: dict | None = None) -> list[dict]:
    """Per-question rows (resumed from `out`, a JSONL file, if made with the same `settings`), one
    graph run per new question; with an `extractor`, the answer is extracted by the official
    protocol before scoring."""
    rows = load_rows(out, settings)
    with open(out, "a") as f:
        for q in tqdm(questions, desc="answering", unit="q", disable=not show_progress):
            if q.qid in rows or q.doc_name not in doc_ids:
                continue
            result = run_ask(store, searcher, llm, q.question, [doc_ids[q.doc_name]], config,
                             checkpoints=out.with_suffix(".checkpoints.sqlite"),
                             # a fresh thread: nothing carried over
                             thread_id=f"{q.qid}-{uuid.uuid4().hex[:8]}", reader=reader)
            retrieved = first_round_hits(result.trace)
            pred, extraction = result.answer, {}
            if extractor is not None:
                pred, extracted_format, raw = extract_answer(extractor, q.question, result.answer)
                extraction = {"response": result.answer, "extracted_format": extracted_format, "extractor_reply": raw,
                              "score_without_extraction": score(q, result.answer)}
            row = {"qid": q.qid, "doc": q.doc_name, "question": q.question, "answer": q.answer,
                   "answer_format": q.answer_format, "pred": pred, **extraction, "score": score(q, pred),
                   "evidence_pages": list(q.evidence_pages), "evidence_sources": list(q.evidence_sources),
                   "doc_type": q.doc_type, "task_tag": q.task, "retrieved": [h["page"] for h in retrieved],
                   "cited": [c["page"] for claim in result.claims for c in claim["citations"]],
                   "confidence": result.confidence, "withheld": result.withheld,
                   "score_without_abstention": score(q, result.withheld) if result.withheld else None,
                   "recalled": [p["id"] for e in result.trace if e["node"] == "memory" for p in e["recalled"]],
                   "rounds": result.rounds, "seconds": result.seconds,
                   "ttft_s": result.ttft_s, "tokens": result.tokens}
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows[q.qid] = row
    wanted = {q.qid for q in questions}
    return [r for r in rows.values() if r["qid"] in wanted]


def summarise(benchmark: str, rows: list[dict], extractor: str | None = None) -> dict:
    """The benchmark's aggregate with latency, tokens and rounds; `extractor` names the extraction model."""
    if not rows:
        return {"questions": 0}
    summary = (longdocurl_aggregate(rows) if benchmark == "longdocurl" else mmlongbench_aggregate(rows))
    seconds = np.array([r["seconds"] for r in rows])
    ttft = np.array([r["ttft_s"] for r in rows])
    hit = [bool(set(r["retrieved"][:5]) & set(r["evidence_pages"])) for r in rows if r["evidence_pages"]]
    extraction = (f"two-step protocol with MMLongBench-Doc's extraction prompt, extractor {extractor}" if extractor
                  else "none (the answer agent's short answer is scored directly)")
    if extractor:  # the same replies scored as they are: the extraction step's own effect
        extraction += f"; accuracy without extraction {np.mean([r['score_without_extraction'] for r in rows]):.3f}"
    return {"questions": len(rows), "extraction": extraction,
            **asdict(summary), **answerable_split(benchmark, rows),
            "evidence_in_top5": float(np.mean(hit)) if hit else None,
            "latency_s": {"p50": float(np.percentile(seconds, 50)), "p95": float(np.percentile(seconds, 95))},
            "ttft_s": {"p50": float(np.percentile(ttft, 50))},
            "tokens_mean": float(np.mean([r["tokens"] for r in rows])),
            "rounds_mean": float(np.mean([r["rounds"] for r in rows]))}


def answerable_split(benchmark: str, rows: list[dict]) -> dict:
    """Accuracy on the answerable and on the unanswerable questions, and the accuracy of always
    answering "Not answerable" on the same questions (scored by the same official rules): the
    baseline that an abstaining system must beat."""
    answerable = [r for r in rows if r["answer"].strip() != NOT_ANSWERABLE]
    unanswerable = [r for r in rows if r["answer"].strip() == NOT_ANSWERABLE]
    always = [_score(benchmark, r["answer"], NOT_ANSWERABLE, r["answer_format"]) for r in rows]
    abstained = [r for r in rows if r["pred"] is not None and r["pred"].strip() == NOT_ANSWERABLE]
    unabstained = [r["score"] if r.get("score_without_abstention") is None else r["score_without_abstention"]
                   for r in rows]  # the withheld answers given instead: what abstaining changed
    return {"answerable": {"accuracy": float(np.mean([r["score"] for r in answerable])) if answerable else 0.0,
                           "count": len(answerable)},
            "unanswerable": {"accuracy": float(np.mean([r["score"] for r in unanswerable])) if unanswerable else 0.0,
                             "count": len(unanswerable)},
            "always_not_answerable": {"accuracy": float(np.mean(always)), "count": len(rows)},
            "abstained": len(abstained), "withheld": sum(bool(r.get("withheld")) for r in rows),
            "accuracy_without_abstention": float(np.mean(unabstained)) if rows else 0.0}

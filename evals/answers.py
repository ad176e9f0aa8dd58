"""End-to-end evaluation: each question goes through the ask graph on its own document; the answer
is scored with the benchmark's official rules (evals.score_mmlongbench, evals.score_longdocurl).

Each row also says whether the gold answer is stated in the evidence pages' text as ingest extracted it
(`stated`: lower-cased, thousands separators and "%" dropped, each list item a substring; None for an
unanswerable question) and whether the region the answer cites contains the answer's words and numbers
(`cited_region_has_answer`, numbers in any form), so the summary reports the questions a reader of the
text can answer apart from those that must be derived (charts, counts, pictures), and how often the
cited box holds the answer.

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
import re
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI
from tqdm import tqdm

from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.forms import lexical_support, stated_claim
from docrefrag.agents.llm import is_local_model
from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.evals.datasets import Question, mmlongbench_format
from docrefrag.evals.extraction import extraction_messages, parse_extraction
from docrefrag.evals.jsonl import load_rows
from docrefrag.evals.score_common import as_list, parse_literal
from docrefrag.evals.score_longdocurl import longdocurl_aggregate, longdocurl_prediction, longdocurl_score
from docrefrag.evals.score_mmlongbench import mmlongbench_aggregate, mmlongbench_score
from docrefrag.graph.ask import AskRun, ask_context, run_ask
from docrefrag.graph.context import AskConfig
from docrefrag.graph.run_checkpoints import new_run_id, run_checkpoints
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

logger = logging.getLogger(__name__)


EXTRACTION_MAX_TOKENS = 256  # upstream's max_tokens for the extractor (gpt-4o, temperature 0)


def extract_answer(extractor: BaseChatModel, question: str, response: str) -> tuple[str | None, str | None, str]:
    """(answer, answer format, the extractor's raw reply) under the official extraction protocol."""
    (user, prefill) = extraction_messages(question, response)
    messages = [HumanMessage(user["content"]), AIMessage(prefill["content"])]
    if is_local_model(extractor):
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


def _normalised(text: str) -> str:
    return " ".join(re.sub(r"(?<=\d),(?=\d{3})|%", "", text.lower()).split())


def answer_is_stated(store: Store, doc_id: str, q: Question) -> bool | None:
    """Whether the gold answer (each item of a list) occurs in the evidence pages' extracted text."""
    if not q.answerable or not q.evidence_pages:
        return None
    pages = set(store.pages.numbers(doc_id))
    text = _normalised("\n".join(store.pages.markdown(doc_id, p) for p in q.evidence_pages if p in pages))
    try:
        items = as_list(parse_literal(q.answer))
    except ValueError:
        items = [q.answer]
    return all(_normalised(str(item)) in text for item in items)


def cited_region_text(store: Store, citation: dict) -> str:
    """The words inside a citation's box (the page's words when it has none)."""
    words = store.pages.get(citation["doc_id"], citation["page"]).words
    if citation.get("bbox") is None:
        return " ".join(w.text for w in words)
    x0, y0, x1, y1 = citation["bbox"]
    return " ".join(w.text for w in words if x0 <= (w.x0 + w.x1) / 2 <= x1 and y0 <= (w.y0 + w.y1) / 2 <= y1)


def cited_region_holds(store: Store, question: str, answer: str, citations: list[dict]) -> bool | None:
    """Whether the first cited region states every word and number of what the answer claims (an option's
    text for its letter); None without a citation or for a yes or a no, which no region writes."""
    claim = stated_claim(question, answer)
    if not citations or claim is None:
        return None
    return lexical_support(claim, cited_region_text(store, citations[0])) == 1.0


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
    context = ask_context(store, searcher, llm, config or AskConfig(), reader)
    checkpoints = run_checkpoints(out.parent, out.stem)
    with open(out, "a") as f:
        for q in tqdm(questions, desc="answering", unit="q", disable=not show_progress):
            if q.qid in rows or q.doc_name not in doc_ids:
                continue
            # a fresh run id (thread): nothing carried over
            result = run_ask(context, AskRun(q.question, new_run_id(q.qid), [doc_ids[q.doc_name]]), checkpoints)
            retrieved = first_round_hits(result.trace)
            citations = [c for claim in result.claims for c in claim["citations"]]
            pred, extraction = result.answer, {}
            if extractor is not None:
                pred, extracted_format, raw = extract_answer(extractor, q.question, result.answer)
                extraction = {"response": result.answer, "extracted_format": extracted_format, "extractor_reply": raw,
                              "score_without_extraction": score(q, result.answer)}
            row = {"qid": q.qid, "doc": q.doc_name, "question": q.question, "answer": q.answer,
                   "answer_format": q.answer_format, "pred": pred, **extraction, "score": score(q, pred),
                   "evidence_pages": list(q.evidence_pages), "evidence_sources": list(q.evidence_sources),
                   "doc_type": q.doc_type, "task_tag": q.task, "retrieved": [h["page"] for h in retrieved],
                   "cited": [c["page"] for c in citations],
                   "stated": answer_is_stated(store, doc_ids[q.doc_name], q),
                   "cited_region_has_answer": cited_region_holds(store, q.question, result.answer, citations),
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
            "evidence_in_top5": float(np.mean(hit)) if hit else None, **statedness_split(rows),
            "abstention_curve": abstention_curve(benchmark, rows),
            "latency_s": {"p50": float(np.percentile(seconds, 50)), "p95": float(np.percentile(seconds, 95))},
            "ttft_s": {"p50": float(np.percentile(ttft, 50))},
            "tokens_mean": float(np.mean([r["tokens"] for r in rows])),
            "rounds_mean": float(np.mean([r["rounds"] for r in rows]))}


TAUS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def abstention_curve(benchmark: str, rows: list[dict]) -> dict[str, dict[str, float | None]]:
    """Accuracy (and MMLongBench-Doc's F1) had the best answer been withheld below each confidence
    threshold instead of the run's `tau` (the rounds the run took stay as they were): the rows from
    which `tau` is chosen, scored by the benchmark's own aggregate."""
    curve = {}
    for tau in TAUS:
        records = []
        for r in rows:
            given = r.get("withheld") or r["pred"] or NOT_ANSWERABLE
            pred = given if (r["confidence"] or 0.0) >= tau else NOT_ANSWERABLE
            records.append({**r, "pred": pred, "score": _score(benchmark, r["answer"], pred, r["answer_format"])})
        if benchmark == "longdocurl":
            curve[f"{tau:.1f}"] = {"accuracy": round(longdocurl_aggregate(records).accuracy, 4), "f1": None}
        else:
            summary = mmlongbench_aggregate(records)
            curve[f"{tau:.1f}"] = {"accuracy": round(summary.accuracy, 4), "f1": round(summary.f1, 4)}
    return curve


def statedness_split(rows: list[dict]) -> dict:
    """Accuracy on the answerable questions whose answer the evidence pages' text states and on those it
    must be derived for; the share of right answers whose cited region holds the answer."""
    out = {}
    for name, flag in (("stated", True), ("derived", False)):
        group = [r["score"] for r in rows if r.get("stated") is flag]
        out[name] = {"accuracy": float(np.mean(group)) if group else 0.0, "count": len(group)}
    right = [r["cited_region_has_answer"] for r in rows
             if r["score"] >= 0.5 and r.get("cited_region_has_answer") is not None]
    out["cited_region_has_answer"] = {"share": float(np.mean(right)) if right else None, "right_answers": len(right)}
    return out


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

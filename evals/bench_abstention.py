"""Which signal tells a right answer from a wrong one: the evidence for the abstention rule.

    python -m docrefrag.evals.bench_abstention --store STORE --data ../shared/data/mmlongbench --limit 60 \
        --decoder qwen-coder-1.5b --out rows.jsonl

Each of the first `limit` MMLongBench-Doc dev questions (those whose document is in the store) goes
through the ask graph once (`--answerer chat`, one round, abstention off) with the decoder as the
only model; per question the rows keep the official score of the answer and three candidate
signals of support: the validator's confidence (lexical support and P(Yes), averaged: design A),
the decoder's own mean log-probability of its answer tokens under the answer prompt (design B),
and the lexical support alone. The summary gives each signal's AUROC (answerable questions
answered right vs every other answer) and the accuracy of abstaining below each threshold, next to
always answering "Not answerable". Rows are appended and resumed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from docrefrag.agents.answer import answer_messages, is_unanswerable, page_texts
from docrefrag.agents.forms import lexical_support, stated_claim
from docrefrag.agents.llm import LocalChatModel
from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.agents.validation import anchored_evidence
from docrefrag.core.decoding import load_causal_lm
from docrefrag.core.text_embedder import TextEmbedder
from docrefrag.core.weights import model_dir
from docrefrag.evals.answers import score
from docrefrag.evals.datasets import document_sources, load_questions
from docrefrag.graph.ask import AskRun, ask_context, run_ask
from docrefrag.graph.context import AskConfig
from docrefrag.graph.run_checkpoints import new_run_id, run_checkpoints
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

SIGNALS = ("confidence", "answer_logprob", "lexical")


def answer_logprob(lm, question: str, pages, answer: str) -> float:
    """Mean log-probability of the answer's tokens after the answer agent's own prompt."""
    turns = [{"role": role, "content": m.content}
             for role, m in zip(("system", "user"), answer_messages(question, pages), strict=True)]
    prompt = lm.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    prompt_ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = lm.tokenizer(answer, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([prompt_ids + answer_ids]),
                          logits_to_keep=len(answer_ids) + 1).logits[0, :-1].float()  # (answer tokens, V)
    return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(answer_ids)[:, None]).mean())


def measure(store: Store, data: Path, limit: int, decoder: str, out: Path) -> None:
    by_name = {d.name: d.doc_id for d in store.catalog.documents() if d.status == "ready"}
    sources = document_sources(data)
    llm = LocalChatModel(path=model_dir(decoder), max_new_tokens=32)
    lm = load_causal_lm(llm.path, chat=True)
    searcher = HybridSearcher(store, TextEmbedder.default())
    config = AskConfig.of(answerer="chat", max_rounds=1, abstain=False)
    context, checkpoints = ask_context(store, searcher, llm, config), run_checkpoints(out.parent, out.stem)
    done = {json.loads(line)["qid"] for line in out.open()} if out.exists() else set()
    with out.open("a") as f:
        for q in load_questions("mmlongbench", data)[:limit]:
            doc_id = by_name.get(Path(sources[q.doc_name]).name) if q.doc_name in sources else None
            if q.qid in done or doc_id is None:
                continue
            t = time.perf_counter()
            result = run_ask(context, AskRun(q.question, new_run_id(q.qid), [doc_id]), checkpoints)
            seconds = time.perf_counter() - t
            read = next(e for e in result.trace if e["node"] == "answer")["pages"]
            pages = page_texts(store, [tuple(p) for p in read], q.question, config.reading.chars_per_page)
            evidence = anchored_evidence(q.question, pages)  # what the validator's lexical support reads
            answered = not is_unanswerable(result.answer)
            claim = stated_claim(q.question, result.answer)  # what the validator's lexical support checks
            row = {"qid": q.qid, "answer": q.answer, "pred": result.answer, "score": score(q, result.answer),
                   "answerable": q.answerable, "abstain_score": score(q, NOT_ANSWERABLE), "seconds": seconds,
                   "confidence": result.confidence if answered else None,
                   "lexical": lexical_support(claim, evidence) if answered and claim is not None else None,
                   "answer_logprob": answer_logprob(lm, q.question, pages, result.answer) if answered else None}
            f.write(json.dumps(row) + "\n")
            f.flush()


def auroc(positive: list[float], negative: list[float]) -> float | None:
    """P(a positive's signal > a negative's), ties counted half."""
    if not positive or not negative:
        return None
    p, n = np.array(positive)[:, None], np.array(negative)[None, :]
    return float((p > n).mean() + 0.5 * (p == n).mean())


def summarise(rows: list[dict]) -> dict:
    """Per signal: AUROC (right answers vs the others) and accuracy when abstaining below a threshold."""
    answered = [r for r in rows if r["confidence"] is not None]
    out = {"questions": len(rows), "answered": len(answered), "answerable": sum(r["answerable"] for r in rows),
           "accuracy_as_answered": float(np.mean([r["score"] for r in rows])),
           "always_not_answerable": float(np.mean([r["abstain_score"] for r in rows])), "signals": {}}
    for name in SIGNALS:
        right = [r[name] for r in answered if r["score"] >= 0.5]
        wrong = [r[name] for r in answered if r["score"] < 0.5]
        values = sorted({r[name] for r in answered})
        cuts = np.quantile(values, [0.1, 0.25, 0.5, 0.75, 0.9]).tolist() if values else []
        if name == "confidence":
            cuts = [0.5, *cuts]  # tau, the default
        by_cut = {f"{c:.3f}": float(np.mean([r["score"] if r[name] is None or r[name] >= c else r["abstain_score"]
                                              for r in rows])) for c in cuts}
        out["signals"][name] = {"auroc": auroc(right, wrong), "right": len(right), "wrong": len(wrong),
                                "accuracy_abstaining_below": by_cut}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, required=True, help="a store holding the benchmark's documents")
    ap.add_argument("--data", type=Path, required=True, help="the MMLongBench-Doc folder (samples.json, documents/)")
    ap.add_argument("--limit", type=int, default=60, help="the first LIMIT dev questions")
    ap.add_argument("--decoder", default="qwen-coder-1.5b", help="a model name of `docrefrag models list`")
    ap.add_argument("--out", type=Path, required=True, help="rows (JSONL), appended and resumed")
    ap.add_argument("--summary-only", action="store_true", help="summarise the rows in --out, answer nothing")
    args = ap.parse_args(argv)
    if not args.summary_only:
        measure(Store(args.store), args.data, args.limit, args.decoder, args.out)
    print(json.dumps(summarise([json.loads(line) for line in args.out.open()]), indent=2))


if __name__ == "__main__":
    main()

"""Which decoder can answer from the right page: oracle-page accuracy, speed and memory per decoder.

    python -m docrefrag.evals.bench_decoders --store STORE --data ../shared/data/mmlongbench --limit 30 \
        --decoder smollm2 --decoder qwen-coder-0.5b --decoder qwen-coder-1.5b --json out.json

Each question is a single-page answerable MMLongBench-Doc question whose evidence page has a text
layer; the answer agent's own chat path (`docrefrag.agents.answer.page_texts` + `answer_question`, the same
prompt and normalisation as `ask --answerer chat`) reads the gold page alone, and the official
`eval_score` scores the short answer. Per decoder: mean score, seconds per question (prefill and
decode together), output tokens, load time, and the process's peak RSS so far (decoders measured
in one process: each row's peak includes the earlier decoders').
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

from docrefrag.agents.answer import answer_question, page_texts
from docrefrag.agents.llm import LocalChatModel
from docrefrag.core.decoding import load_causal_lm
from docrefrag.core.weights import model_dir
from docrefrag.evals.datasets import document_sources, load_questions, mmlongbench_format
from docrefrag.evals.score_mmlongbench import mmlongbench_score
from docrefrag.indexes.store import Store


def oracle_questions(store: Store, data: Path, limit: int):
    """(question, doc_id) of the first `limit` single-page answerable questions with a text layer."""
    by_name = {d.name: d.doc_id for d in store.catalog.documents() if d.status == "ready"}
    sources = document_sources(data)
    out = []
    for q in load_questions("mmlongbench", data):
        if not q.answerable or len(q.evidence_pages) != 1 or q.doc_name not in sources:
            continue
        doc_id = by_name.get(Path(sources[q.doc_name]).name)
        if doc_id is None or q.evidence_pages[0] not in store.pages.numbers(doc_id):
            continue
        record = store.pages.get(doc_id, q.evidence_pages[0])
        if record.ocr or len(record.words) < 20:
            continue
        out.append((q, doc_id))
        if len(out) == limit:
            break
    return out


def measure(name: str, store: Store, questions, chars: int) -> dict:
    path = model_dir(name)
    t0 = time.perf_counter()
    load_causal_lm(path, chat=True)  # the copy LocalChatModel then uses
    load_s = time.perf_counter() - t0
    llm = LocalChatModel(path=path, max_new_tokens=32)
    scores, rows, out_tokens, wall = [], [], 0, 0.0
    for q, doc_id in questions:
        pages = page_texts(store, [(doc_id, q.evidence_pages[0])], q.question, chars)
        t = time.perf_counter()
        answer, n_out, _ = answer_question(q.question, [[p] for p in pages], llm)
        wall += time.perf_counter() - t
        score = mmlongbench_score(q.answer, answer, mmlongbench_format(q))
        scores.append(score)
        out_tokens += n_out
        rows.append({"qid": q.qid, "gold": q.answer, "answer": answer, "score": score})
    return {"decoder": name, "questions": len(scores), "accuracy": round(statistics.mean(scores), 3),
            "seconds": round(wall, 1), "s_per_question": round(wall / max(len(scores), 1), 2),
            "output_tokens": out_tokens, "load_s": round(load_s, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "rows": rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="a store holding the benchmark's documents")
    ap.add_argument("--data", type=Path, required=True, help="the MMLongBench-Doc folder (samples.json, documents/)")
    ap.add_argument("--limit", type=int, default=30, help="questions")
    ap.add_argument("--chars", type=int, default=3000, help="characters of the gold page read")
    ap.add_argument("--decoder", action="append", required=True, help="a model name of `docrefrag models list`")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    with Store(args.store) as store:
        questions = oracle_questions(store, args.data, args.limit)
        results = []
        for name in args.decoder:
            r = measure(name, store, questions, args.chars)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "rows"}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

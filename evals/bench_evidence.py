"""The page pipeline against the evidence controller at equal reader token budgets (issue: MAGE-RAG).

    python -m docrefrag.evals.bench_evidence --benchmark mmlongbench --data ../shared/data/mmlongbench \
        --store STORE [--limit 120] [--budgets 250 500 1000 2000] [--answer] --out rows.jsonl [--plot curve.png]

Each answerable question with evidence pages whose document is in STORE: the question's fused top
DEPTH pages within its document (`HybridSearcher.search`, the ask graph's first search). *pages*: those
pages in fused order, each cut query-focused to `AskConfig.reading.chars_per_page` (`page_texts`, what the chat
answerer reads), then cut to the budget (`pages_within`). *graph*: the evidence controller (`gather`) from
the same pages, its token budget the same. Both count tokens with `agents.evidence.count_tokens`. Per
budget and method: evidence-page recall (single-page questions: the page was read; cross-page: the share
of their evidence pages read, and whether all were), tokens read, and with `--answer` the official score
of the chat model's answer from what was read. Rows go to --out (JSONL); a table to stdout; with --plot,
budget-accuracy (or, without --answer, budget-recall) curves.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from docrefrag.agents.answer import answer_question, page_texts
from docrefrag.agents.evidence import Budgets, count_tokens, gather, pages_within
from docrefrag.evals.answers import score
from docrefrag.evals.datasets import Question, load_questions
from docrefrag.evals.measure import machine
from docrefrag.graph.context import AskConfig

DEPTH = 10  # fused pages each method may read from
STEPS = 200  # the controller's step budget: generous, so that the token budget binds
SECONDS = 10.0


def _doc_ids(store) -> dict[str, str]:
    ids = {}
    for d in store.catalog.documents():
        if d.status == "ready":
            ids[d.name] = ids[Path(d.name).stem] = ids[f"{Path(d.name).stem}.pdf"] = d.doc_id
    return ids


def _recall(q: Question, pages: set[int]) -> dict:
    found = [p in pages for p in q.evidence_pages]
    return {"recall": sum(found) / len(found), "all": all(found)}


def run(questions: list[Question], store, searcher, budgets: list[int], llm=None) -> list[dict]:
    ids, chars = _doc_ids(store), AskConfig().reading.chars_per_page
    rows = []
    for q in questions:
        doc_id = ids.get(q.doc_name)
        if doc_id is None or not q.answerable or not q.evidence_pages:
            continue
        hits = searcher.search(q.question, k=DEPTH, doc_ids=[doc_id])
        top = [(h.doc_id, h.page) for h in hits]
        full = page_texts(store, top, q.question, chars)
        vector = np.asarray(searcher.embedder.embed_queries([q.question])[0], dtype=np.float32)
        for budget in budgets:
            for method in ("pages", "graph"):
                start = time.perf_counter()
                if method == "pages":
                    read = pages_within(full, budget)
                    extra = {}
                else:
                    evidence = gather(store, q.question, vector, top, Budgets(budget, STEPS, SECONDS))
                    read = evidence.pages
                    extra = {"steps": evidence.steps, "stopped": evidence.stopped}
                row = {"qid": q.qid, "benchmark": q.benchmark, "doc": q.doc_name, "budget": budget, "method": method,
                       "cross_page": len(q.evidence_pages) > 1, "evidence_pages": list(q.evidence_pages),
                       "pages_read": [p.page for p in read], "tokens": sum(count_tokens(p.text) for p in read),
                       "select_s": round(time.perf_counter() - start, 4), **extra,
                       **_recall(q, {p.page for p in read if p.text.strip()})}
                if llm is not None:
                    answer = answer_question(q.question, [read], llm)[0] if read else "Not answerable"
                    row.update(answer=answer, score=score(q, answer))
                rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["budget"], r["method"], "cross" if r["cross_page"] else "single")].append(r)
    lines = ["| budget | method | questions | evidence-page recall | all evidence read | tokens read | accuracy |",
             "|---|---|---|---|---|---|---|"]
    for (budget, method, kind), rs in sorted(groups.items(), key=lambda g: (g[0][2], g[0][0], g[0][1])):
        acc = f"{np.mean([r['score'] for r in rs]):.3f}" if "score" in rs[0] else "-"
        lines.append(f"| {budget} ({kind}-page) | {method} | {len(rs)} | {np.mean([r['recall'] for r in rs]):.3f} | "
                     f"{np.mean([r['all'] for r in rs]):.3f} | {np.mean([r['tokens'] for r in rs]):.0f} | {acc} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", choices=("mmlongbench", "longdocurl"), required=True)
    parser.add_argument("--data", type=Path, required=True, help="the benchmark's folder (its samples.json)")
    parser.add_argument("--store", type=Path, required=True, help="a store holding the questions' documents")
    parser.add_argument("--limit", type=int, default=None, help="the first N questions of the file")
    parser.add_argument("--budgets", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--answer", action="store_true", help="also answer with the chat model and score it")
    parser.add_argument("--llm", default=None, help="the chat model (default: the local default)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    from docrefrag.api import DocRefrag

    dr = DocRefrag(store=args.store)
    store = dr.usable_store()
    from docrefrag.indexes.hybrid import HybridSearcher

    searcher = HybridSearcher(store, dr.embedder)
    questions = load_questions(args.benchmark, args.data)[: args.limit]
    started = time.perf_counter()
    rows = run(questions, store, searcher, args.budgets, dr.llm(args.llm) if args.answer else None)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{args.benchmark}, {len({r['qid'] for r in rows})} questions, {time.strftime('%Y-%m-%d')}, {machine()}, "
          f"{time.perf_counter() - started:.0f} s")
    print(table(rows))
    if args.plot:
        from docrefrag.evals.report import budget_curves

        budget_curves(rows, args.plot, f"{args.benchmark}: reader token budget")


if __name__ == "__main__":
    main()

"""Experience memory: a document's later questions with the plans of its earlier ones, against without them.

    python -m docrefrag.evals.bench_memory --benchmark mmlongbench --data ../shared/data/mmlongbench \
        --store STORE [--limit 60] [--llm SPEC] [--config run.toml] --out DIR

The first --limit questions of the file, per document in the file's order, split in two halves: the first
ceil(n/2) ("first") and the rest ("second"); a document with one question is left out. The store's memory
is emptied; the first halves run through the ask graph with the memory on (their validated plans stored);
then the second halves run twice, memory off and memory on (recalling the first halves' plans, and those
of the second-half questions before it: the memory as `ask` uses it). Each run is
`evals.answers.evaluate_answers` (the official score; its rows name the plans each question recalled) under
AskConfig (or --config) with only `search.memory` changed. Rows go to DIR/{first,second-no-memory,second-memory}
.jsonl, written anew on each run (the memory a resumed run would need is gone). Printed: per run the
questions, accuracy, answerable accuracy, mean rounds, mean and p50 seconds, questions that recalled a plan,
plans in the memory after it.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from docrefrag.evals.answers import answerable_split, evaluate_answers
from docrefrag.evals.measure import machine

RUNS = (("first", True), ("second-no-memory", False), ("second-memory", True))


def halves(questions: list) -> tuple[list, list]:
    """(first, second): per document with two questions or more, its first ceil(n/2) and the rest, in file order."""
    by_doc: dict[str, list] = defaultdict(list)
    for q in questions:
        by_doc[q.doc_name].append(q)
    first, second = [], []
    for qs in by_doc.values():
        if len(qs) > 1:
            cut = math.ceil(len(qs) / 2)
            first += qs[:cut]
            second += qs[cut:]
    return first, second


def summary(benchmark: str, name: str, rows: list[dict]) -> dict:
    seconds = [r["seconds"] for r in rows]
    return {"run": name, "questions": len(rows), "accuracy": float(np.mean([r["score"] for r in rows])),
            "answerable_accuracy": answerable_split(benchmark, rows)["answerable"]["accuracy"],
            "rounds_mean": float(np.mean([r["rounds"] for r in rows])), "seconds_mean": float(np.mean(seconds)),
            "seconds_p50": float(np.median(seconds)), "recalled": sum(bool(r["recalled"]) for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", choices=("mmlongbench", "longdocurl"), required=True)
    parser.add_argument("--data", type=Path, required=True, help="the benchmark's folder (its samples.json)")
    parser.add_argument("--store", type=Path, required=True, help="a store (missing documents are ingested)")
    parser.add_argument("--limit", type=int, default=None, help="the first N questions of the file")
    parser.add_argument("--llm", default=None, help="the chat model (default: the local default)")
    parser.add_argument("--config", type=Path, default=None, help="AskConfig fields (TOML or JSON), as ask's")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the rows")
    args = parser.parse_args()
    from docrefrag.api import DocRefrag
    from docrefrag.evals.harness import prepare, run_settings
    from docrefrag.graph.context import AskConfig
    from docrefrag.indexes.hybrid import HybridSearcher

    base = AskConfig.from_file(args.config) if args.config else AskConfig()
    args.out.mkdir(parents=True, exist_ok=True)
    with DocRefrag(store=args.store) as dr:
        store = dr.open_store(create=True)
        present, doc_ids, _ = prepare(args.benchmark, args.data, store, args.limit, True, dr.embedder)
        first, second = halves([q for q in present if q.doc_name in doc_ids])
        llm = dr.llm(args.llm)
        searcher = HybridSearcher(store, dr.embedder)
        reader = dr.reader() if base.needs_reader else None
        store.memory.clear()
        started, results = time.perf_counter(), []
        for name, memory in RUNS:
            config = AskConfig.from_values({"memory": memory}, base)
            out = args.out / f"{name}.jsonl"
            out.unlink(missing_ok=True)
            rows = evaluate_answers(store, searcher, llm, first if name == "first" else second, doc_ids, out, config,
                                    True, reader, settings=run_settings(store, llm=llm, reader=reader))
            results.append(summary(args.benchmark, name, rows) | {"plans_in_memory": len(store.memory.plans())})
    print(f"{args.benchmark}, {len(first)} + {len(second)} questions over {len({q.doc_name for q in second})} "
          f"documents, {time.strftime('%Y-%m-%d')}, {machine()}, {time.perf_counter() - started:.0f} s")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

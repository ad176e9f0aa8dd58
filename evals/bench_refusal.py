"""How long the CLI takes to refuse what it cannot do, from a cold start (a fresh process):
`ask` and `search` on a store that an ingest is writing, and an empty query or question.

    python -m docrefrag.evals.bench_refusal --store STORE [--repeat 5]

The store must hold a ready document. The benchmark holds the store as a running ingest does (its
ingest lock and its embedded visual index), runs each command `--repeat` times in a fresh process,
and prints the median and the maximum wall time with the refusal's first line. The store is
checked before any model loads, so a refusal costs the imports and the store's open, not seconds of
loading weights.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from docrefrag.indexes.store import Store
from docrefrag.indexes.writer import IngestLock

CASES = {
    "ask, store busy": ["ask", "What was reported?", "--quiet"],
    "search, store busy": ["search", "revenue"],
    "search, empty query": ["search", " "],
    "ask, empty question": ["ask", " "],
}


def bench(store: Path, repeat: int) -> list[dict]:
    rows = []
    with Store(store) as held, IngestLock(store) as lock:  # what a running ingest holds
        lock.writing(None)
        held.visual  # noqa: B018
        for name, args in CASES.items():
            seconds, message = [], ""
            for _ in range(repeat):
                start = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "docrefrag", *args, "--store", str(store)],
                                      capture_output=True, text=True, timeout=120)
                seconds.append(time.perf_counter() - start)
                message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
            rows.append({"case": name, "median_s": round(statistics.median(seconds), 2),
                         "max_s": round(max(seconds), 2), "refusal": message[:160]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store holding at least one ready document")
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per case (default 5)")
    args = parser.parse_args()
    print(json.dumps(bench(args.store, args.repeat), indent=1))


if __name__ == "__main__":
    main()

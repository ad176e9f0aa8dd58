"""Benchmark of the two embedded Qdrant engines for the visual page index.

Compares qdrant-client's local mode with qdrant-edge, and qdrant-edge behind the
``docrefrag.indexes.visual.VisualIndex`` facade (the ``visual-index`` row), on a synthetic
corpus shaped like the visual index (the engines and the corpus: evals/bench_qdrant_engines.py).

Measured per engine: ingest time, size on disk, and, in a fresh process (the CLI reopens the
index on every call): import time, open time, first-query time, peak RSS; then query latency
p50/p95 for exact MaxSim (a) within one document (payload filter), (b) over the whole store,
and (c) over the whole store with a first stage of 100 pages by the pooled vector.

    python -m docrefrag.evals.bench_qdrant --pages 2500            # markdown table
    python -m docrefrag.evals.bench_qdrant --pages 2500 --json     # the same numbers as JSON
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from docrefrag.evals.bench_qdrant_engines import (
    DIM,
    ENGINES,
    Corpus,
    client_local_ingest,
    client_local_open,
    client_local_query,
    edge_ingest,
    edge_open,
    edge_query,
    visual_index_ingest,
    visual_index_open,
    visual_index_query,
)

logger = logging.getLogger(__name__)


@dataclass
class Result:
    engine: str
    pages: int
    vectors: int
    ingest_s: float
    disk_mb: float
    process_s: float = 0.0  # fresh process wall up to the first answer: interpreter, imports, open, 1st query
    import_s: float = 0.0
    open_s: float = 0.0
    first_query_s: float = 0.0
    reopen_rss_mb: float = 0.0  # peak RSS after open + first query
    peak_rss_mb: float = 0.0  # peak RSS after all the timed queries
    anon_rss_mb: float = 0.0  # anonymous (non-file) RSS after all the timed queries
    doc_pages: int = 0
    doc_ms: dict[str, float] = field(default_factory=dict)
    all_ms: dict[str, float] = field(default_factory=dict)
    first_stage_ms: dict[str, float] = field(default_factory=dict)


def _dir_mb(path: Path) -> float:
    """Allocated size (qdrant-edge preallocates sparse 32 MiB files: apparent size overstates it)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _anon_rss_mb() -> float:
    """Private anonymous memory now (RSS minus mmapped file pages the kernel can reclaim)."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"RssAnon:\s+(\d+) kB", status).group(1)) / 1024


def _percentiles(times_s: list[float]) -> dict[str, float]:
    ms = np.asarray(times_s) * 1000
    return {"p50": round(float(np.percentile(ms, 50)), 1), "p95": round(float(np.percentile(ms, 95)), 1)}


def child_main(engine: str, path: Path, doc_id: str, n_queries: int) -> dict:
    """Runs in a fresh process: open, first query, then timed queries; returns the timings."""
    t0 = time.perf_counter()
    if engine == "client-local":
        import qdrant_client  # noqa: F401

        open_fn, query_fn = client_local_open, client_local_query
    elif engine == "visual-index":
        import qdrant_edge  # noqa: F401

        import docrefrag.indexes.visual  # noqa: F401

        open_fn, query_fn = visual_index_open, visual_index_query
    else:
        import qdrant_edge  # noqa: F401

        open_fn, query_fn = edge_open, edge_query
    t1 = time.perf_counter()
    index = open_fn(path)
    t2 = time.perf_counter()
    rng = np.random.default_rng(123)

    def query_vec() -> np.ndarray:
        q = rng.standard_normal(DIM, dtype=np.float32)
        return q / np.linalg.norm(q)

    hits = query_fn(index, query_vec(), doc_id, False)
    t3 = time.perf_counter()
    assert hits, "first query returned nothing"
    print("first-query-done", flush=True)  # the parent times the process up to this line
    out = {
        "import_s": t1 - t0,
        "open_s": t2 - t1,
        "first_query_s": t3 - t2,
        "reopen_rss_mb": _peak_rss_mb(),
    }
    for key, doc, first_stage in (("doc_ms", doc_id, False), ("all_ms", None, False), ("first_stage_ms", None, True)):
        times = []
        for _ in range(n_queries):
            q = query_vec()
            ts = time.perf_counter()
            query_fn(index, q, doc, first_stage)
            times.append(time.perf_counter() - ts)
        out[key] = _percentiles(times)
    out["peak_rss_mb"] = _peak_rss_mb()
    out["anon_rss_mb"] = _anon_rss_mb()
    index.close()
    return out


def bench_engine(engine: str, corpus: Corpus, workdir: Path, n_queries: int) -> Result:
    path = workdir / engine
    shutil.rmtree(path, ignore_errors=True)
    logger.info("ingesting %d pages into %s", corpus.pages, engine)
    t0 = time.perf_counter()
    if engine == "client-local":
        client_local_ingest(path, corpus)
    elif engine == "visual-index":
        visual_index_ingest(path, corpus)
    else:
        edge_ingest(path, corpus, optimize=engine == "edge-optimized")
    ingest_s = time.perf_counter() - t0
    docs = corpus.docs()
    doc_id, doc_pages = max(docs, key=lambda d: d[1])
    n_vectors = sum(len(chunks) for batch in corpus.batches() for *_, chunks in batch)
    result = Result(engine, corpus.pages, n_vectors, round(ingest_s, 1), round(_dir_mb(path), 1), doc_pages=doc_pages)

    logger.info("reopening %s in a fresh process", engine)
    cmd = [sys.executable, "-m", "docrefrag.evals.bench_qdrant", "--child", engine, str(path), doc_id, str(n_queries)]
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
        first = proc.stdout.readline()
        result.process_s = round(time.perf_counter() - t0, 2)
        rest = proc.stdout.read()
    if proc.returncode != 0 or first.strip() != "first-query-done":
        raise RuntimeError(f"the fresh {engine} process failed (exit {proc.returncode}): {first}{rest}")
    child = json.loads(rest.strip().splitlines()[-1])
    for key, value in child.items():
        setattr(result, key, round(value, 3) if isinstance(value, float) else value)
    return result


def markdown(results: list[Result]) -> str:
    head = (
        "| engine | pages | vectors | ingest s | disk MB | fresh process to 1st answer s | import s | open s "
        "| 1st query s "
        "| peak RSS after 1st query MB | peak RSS MB | anon RSS MB | doc p50/p95 ms | all p50/p95 ms "
        "| all, 1st stage 100 p50/p95 ms |"
    )
    rows = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in results:
        rows.append(
            f"| {r.engine} | {r.pages} | {r.vectors} | {r.ingest_s} | {r.disk_mb} | {r.process_s} | "
            f"{r.import_s:.2f} | {r.open_s:.2f} | {r.first_query_s:.3f} | {r.reopen_rss_mb:.0f} | "
            f"{r.peak_rss_mb:.0f} | {r.anon_rss_mb:.0f} | {r.doc_ms['p50']} / {r.doc_ms['p95']} ({r.doc_pages} p) | "
            f"{r.all_ms['p50']} / {r.all_ms['p95']} | {r.first_stage_ms['p50']} / {r.first_stage_ms['p95']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2500, help="pages in the synthetic store")
    parser.add_argument("--queries", type=int, default=30, help="timed queries per kind")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {ENGINES}")
    parser.add_argument("--workdir", type=Path, default=None, help="where the stores go (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the markdown table")
    parser.add_argument("--child", nargs=4, metavar=("ENGINE", "PATH", "DOC_ID", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        engine, path, doc_id, n = args.child
        print(json.dumps(child_main(engine, Path(path), doc_id, int(n))))
        return

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engines {unknown}; choose from {list(ENGINES)}")
    if args.pages < 100:
        parser.error(f"--pages={args.pages} is too small; pass at least 100 (one document)")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    corpus = Corpus(args.pages)
    tmp = tempfile.TemporaryDirectory(prefix="bench_qdrant_") if args.workdir is None else None
    workdir = Path(tmp.name) if tmp else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = [bench_engine(e, corpus, workdir, args.queries) for e in engines]
    finally:
        if tmp:
            tmp.cleanup()
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(f"machine: {os.cpu_count()} cores; {args.queries} queries per kind; exact MaxSim\n")
        print(markdown(results))


if __name__ == "__main__":
    main()

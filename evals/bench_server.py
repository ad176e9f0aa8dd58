"""Load check of `docrefrag serve` on loopback: concurrent searches, then concurrent asks.

    python -m docrefrag.evals.bench_server --make-report /tmp/bench-server [--store STORE] [--searches 50] \
        [--asks 5] [--mixed] [--cold] [--timeout 1800] [--llm SPEC] [--json out.json]

Starts `docrefrag serve` on a free 127.0.0.1 port over `--store` (or `--make-report DIR`: the report of
`docrefrag demo`, written to DIR and ingested into DIR/store) and waits until it answers. A warm-up
(one search, then one ask, alone: they load the models; skipped with `--cold`), then `--searches` GET
/search at once, then `--asks` POST /ask at once (each event stream read to its `result` or `error`),
then with `--mixed` both together; the questions are the report's. The server runs them one at a time
on its store's thread, so a latency includes the wait behind the others. Per phase: p50/p90/p99/max
latency, throughput, errors (a status other than 200, an `error` event) and lost requests (no
response, a stream that ended without `result` or `error`, unfinished at the time bound). Also the
server's peak memory (sum of PSS of its process tree, measure.PeakRSS), wall time, CPU model and
vector extensions, load averages before and after. The server is stopped with SIGINT and must exit
within 60 s. Exit status 1 on any error, lost request, unclean stop or a run past `--timeout`
(seconds, from the server's start to its stop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import httpx
import numpy as np

from docrefrag.core.synthetic_report import sample_report
from docrefrag.evals.measure import PeakRSS, machine

PHASES = ("first_search", "first_ask", "search", "ask", "mixed")


def report_store(folder: Path) -> tuple[Path, list[str]]:
    """Write the demo's report to `folder` and ingest it (`docrefrag ingest`); (store, its questions)."""
    folder.mkdir(parents=True, exist_ok=True)
    facts = sample_report(folder / "sample-report.pdf")
    subprocess.run([sys.executable, "-m", "docrefrag", "ingest", str(folder / "sample-report.pdf"),
                    "--store", str(folder / "store")], check=True)
    return folder / "store", [f.question for f in facts]


async def one(client: httpx.AsyncClient, kind: str, question: str, rows: list[dict]) -> None:
    start, row = time.perf_counter(), {"kind": kind, "question": question, "outcome": "lost", "status": None}
    rows.append(row)  # a request cancelled at the time bound stays lost
    try:
        if kind == "search":
            response = await client.get("/search", params={"q": question, "k": 5})
            row["status"] = response.status_code
            row["outcome"] = "ok" if response.status_code == 200 and "hits" in response.json() else "error"
        else:
            async with client.stream("POST", "/ask", json={"question": question}) as response:
                row["status"], event = response.status_code, None
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:") and event in ("result", "error"):
                        data = json.loads(line[5:])
                        row["outcome"] = "ok" if event == "result" else "error"
                        row["detail"] = data.get("answer") if event == "result" else data.get("message")
                if response.status_code != 200:
                    row["outcome"], row["detail"] = "error", (await response.aread()).decode()[:200]
    except (httpx.HTTPError, ValueError) as e:  # ValueError: a body that is not JSON
        row["detail"] = f"{type(e).__name__}: {e}"
    row["latency_s"] = round(time.perf_counter() - start, 3)


async def phase(base: str, requests: list[tuple[str, str]], deadline: float) -> tuple[list[dict], float]:
    """Send every (kind, question) at once; the rows when all are answered or the deadline passes, the wall time."""
    rows: list[dict] = []
    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(None, connect=30),
                                 limits=httpx.Limits(max_connections=None)) as client:
        tasks = [asyncio.create_task(one(client, kind, q, rows)) for kind, q in requests]
        _, pending = await asyncio.wait(tasks, timeout=max(deadline - time.monotonic(), 0))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return rows, time.perf_counter() - start


def summary(rows: list[dict], wall_s: float) -> dict:
    lat = [r["latency_s"] for r in rows if r["outcome"] == "ok"]
    pct = {f"p{q}_s": round(float(np.percentile(lat, q)), 3) for q in (50, 90, 99)} if lat else {}
    return {"requests": len(rows), "ok": len(lat), **pct, "max_s": max(lat, default=None),
            "errors": sum(r["outcome"] == "error" for r in rows), "lost": sum(r["outcome"] == "lost" for r in rows),
            "wall_s": round(wall_s, 2), "per_s": round(len(lat) / wall_s, 2) if wall_s else None}


def wait_until_up(proc: subprocess.Popen, base: str, deadline: float) -> None:
    while True:
        try:
            if httpx.get(f"{base}/documents", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not answer (exit status {proc.poll()})")
        time.sleep(0.3)


def bench(store: Path, questions: list[str], args: argparse.Namespace) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base, start = f"http://127.0.0.1:{port}", time.monotonic()
    deadline = start + args.timeout
    command = [sys.executable, "-m", "docrefrag", "serve", "--store", str(store), "--port", str(port),
               *(["--llm", args.llm] if args.llm else [])]
    out: dict = {"date": date.today().isoformat(), "machine": machine(), "load_before": os.getloadavg(),
                 "store": str(store), "llm": args.llm or "the server's default"}
    proc = subprocess.Popen(command)
    try:
        with PeakRSS(interval=0.5, pid=proc.pid) as memory:
            wait_until_up(proc, base, deadline)
            out["startup_s"] = round(time.monotonic() - start, 2)
            searches = [("search", questions[i % len(questions)]) for i in range(args.searches)]
            asks = [("ask", questions[i % len(questions)]) for i in range(args.asks)]
            plan = [("first_search", searches[:1]), ("first_ask", asks[:1])] * (not args.cold)
            plan += [("search", searches), ("ask", asks)] + [("mixed", searches + asks)] * args.mixed
            rows = []
            for name, requests in plan:
                got, wall = asyncio.run(phase(base, requests, deadline))
                out[name], rows = summary(got, wall), rows + [{**r, "phase": name} for r in got]
                print(f"{name}: {json.dumps(out[name])}", file=sys.stderr)
        out["server_peak_pss_mb"] = round(memory.peak / 1e6)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out["server_exit"] = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out["server_exit"] = f"killed: no exit within 60 s of SIGINT (then {proc.wait()})"
    out["wall_s"], out["load_after"] = round(time.monotonic() - start, 1), os.getloadavg()
    out["timed_out"] = time.monotonic() > deadline
    out["requests"] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=None, help="an existing store with a ready document")
    parser.add_argument("--make-report", type=Path, default=None, metavar="DIR",
                        help="write the demo's generated report to DIR and ingest it into DIR/store")
    parser.add_argument("--searches", type=int, default=50, help="concurrent searches (default 50)")
    parser.add_argument("--asks", type=int, default=5, help="concurrent asks (default 5)")
    parser.add_argument("--cold", action="store_true", help="no warm-up: the first search and ask load the models")
    parser.add_argument("--mixed", action="store_true", help="then the searches and the asks together")
    parser.add_argument("--timeout", type=float, default=1800, help="bound on the whole run, seconds (default 1800)")
    parser.add_argument("--llm", default=None, help="the server's chat model (serve --llm; default: its own)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    if (args.store is None) == (args.make_report is None):
        parser.error("give one of --store and --make-report")
    if args.make_report:
        store, questions = report_store(args.make_report)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            store, questions = args.store, [f.question for f in sample_report(Path(tmp) / "report.pdf")]
    out = bench(store, questions, args)
    text = json.dumps({k: v for k, v in out.items() if k != "requests"}, indent=1)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    phases = [out[name] for name in PHASES if name in out]
    failed = any(p["errors"] or p["lost"] for p in phases) or out["timed_out"] or out["server_exit"] != 0
    sys.exit(1 if failed or len(phases) < 2 + 2 * (not args.cold) + args.mixed else 0)


if __name__ == "__main__":
    main()

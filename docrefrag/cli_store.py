"""The store commands of the command line: ingest, docs, search, memory (list or clear the experience
memory's plans) and demo (which ingests a generated report and asks it its questions). Each prints a table, or
JSON with --json."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from docrefrag.cli_common import EXIT_OK, EXIT_PARTIAL, api

if TYPE_CHECKING:
    from docrefrag.indexes.catalog import DocInfo


def cmd_ingest(args: argparse.Namespace) -> int:
    if not args.paths and not args.upgrade:
        raise ValueError("give a PDF, a folder of PDFs or a folder of page images to ingest (or --upgrade)")
    with api(args) as dr:
        results = dr.ingest(args.paths, workers=args.workers,
                            show_progress=not args.json and sys.stderr.isatty()) if args.paths else []
        upgraded = dr.upgrade() if args.upgrade else []
        if (dr.store_path / "catalog.sqlite").is_file():  # nothing to ingest creates no store
            print(f"store: {dr.store_path}", file=sys.stderr)
    if args.json:
        print(json.dumps([asdict(r) for r in results] + ([{"upgraded": upgraded}] if args.upgrade else []), indent=2))
    elif args.upgrade:
        print(f"upgraded   {len(upgraded)} document(s) to the current evidence graph" +
              (f": {', '.join(upgraded)}" if upgraded else " (all were current)"))
    for r in results:
        if args.json:
            break
        if r.status == "failed":
            print(f"failed     {r.message}")
            continue
        rate = f"{r.pages / r.seconds:.1f} pages/s" if r.seconds > 0 and r.status != "unchanged" else ""
        extra = f", {r.ocr_pages} OCR" if r.ocr_pages else ""
        extra += f", {r.failed_pages} failed pages" if r.failed_pages else ""
        print(f"{r.status:10s} {r.doc_id}  {r.pages} pages{extra}  {rate}  {r.source}")
        if r.message:
            print(f"           {r.message}")
    return EXIT_PARTIAL if any(r.status == "failed" or r.failed_pages for r in results) else EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    with api(args) as dr:
        hits = dr.search(args.query, k=args.k, doc=args.doc, method=args.fusion)
        names = {d.doc_id: d.name for d in dr.docs()}
    if args.json:
        print(json.dumps([{**asdict(h), "name": names.get(h.doc_id)} for h in hits], indent=2))
        return EXIT_OK
    if not hits:  # every page a candidate, so only documents without a readable page give none
        print("no pages found: the documents searched have no readable page (`docrefrag docs` shows failed pages)")
        return EXIT_OK
    print(f"{'#':>2} {'document':32s} {'page':>4} {'fused':>7} {'bm25':>7} {'visual':>7}  snippet")
    for i, h in enumerate(hits, 1):
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        snippet = " ".join(h.snippet.split())[:70]
        print(f"{i:>2} {names.get(h.doc_id, h.doc_id)[:32]:32s} {h.page:>4} {h.fused:>7.4f} "
              f"{fmt(h.sparse):>7} {fmt(h.dense):>7}  {snippet}")
    return EXIT_OK


def cmd_docs(args: argparse.Namespace) -> int:
    with api(args) as dr:
        docs = dr.docs()
    if args.json:
        print(json.dumps([asdict(d) for d in docs], indent=2))
        return EXIT_OK
    if not docs:
        print("no documents; add some with `docrefrag ingest PATH`")
        return EXIT_OK
    print(f"{'doc id':16s} {'pages':>5} {'ocr':>4} {'failed':>6} {'health bm25/dense':>17} {'status':9s} name")
    for d in docs:
        status = (d.status if d.status == "ready" else f"ingesting now {d.pages_done}/{d.n_pages} (PID {d.writer_pid})"
                  if d.writer_pid else f"interrupted {d.pages_done}/{d.n_pages} (rerun ingest to resume)")
        print(f"{d.doc_id:16s} {d.n_pages:>5} {d.ocr_pages:>4} {d.failed_pages:>6} {_health(d):>17} "
              f"{status:9s} {d.name}")
    return EXIT_OK


def cmd_memory(args: argparse.Namespace) -> int:
    with api(args) as dr:
        if args.memory_command == "clear":
            print(f"removed {dr.clear_plans()} plan(s) from the experience memory of {dr.store_path}")
            return EXIT_OK
        plans, names = dr.plans(), {d.doc_id: d.name for d in dr.docs()}
    if args.json:
        print(json.dumps([asdict(p) for p in plans], indent=2))
        return EXIT_OK
    if not plans:
        print("no stored plans; a validated `docrefrag ask` answer stores its plan (unless --no-memory)")
        return EXIT_OK
    print(f"{'id':>4} {'date':16s} {'rounds':>6} {'conf':>5}  {'documents':32s} question")
    for p in plans:
        docs = ", ".join(names.get(d, d) for d in p.doc_ids)
        print(f"{p.id:>4} {time.strftime('%Y-%m-%d %H:%M', time.localtime(p.created_at)):16s} {p.rounds:>6} "
              f"{p.confidence:>5.2f}  {docs[:32]:32s} {p.question}")
    return EXIT_OK


def _health(d: DocInfo) -> str:
    """The branches' health on the document (indexes/health.py): "-" not measured yet (the first search
    measures it), "n/a" not judged (a short document or little text)."""
    if not d.health_measured:
        return "-"
    return "n/a" if d.health_sparse is None else f"{d.health_sparse:.2f}/{d.health_dense:.2f}"


def cmd_demo(args: argparse.Namespace) -> int:
    from docrefrag.api import DocRefrag
    from docrefrag.core.synthetic_report import sample_report

    pdf = args.dir / "sample-report.pdf"
    facts = sample_report(pdf, pages=args.pages)
    print(f"wrote {pdf} ({args.pages} pages)")
    with DocRefrag(store=args.dir / "store") as dr:
        for r in dr.ingest([pdf], show_progress=sys.stderr.isatty()):
            print(f"ingest: {r.status} {r.doc_id} {r.pages} pages in {r.seconds:.1f} s")
        # the report's prose and table facts; its bar charts' values are drawn as labels whose pairing with the
        # bars a text-only model cannot see (no vision model ships in a package): see README, Status
        for fact in [f for f in facts if f.kind != "chart"][:args.questions]:
            result = dr.ask(fact.question)  # the default models and settings, as `docrefrag ask`
            print(f"\nQ: {fact.question}\n   answer: {result.answer}  ({result.seconds:.1f} s, confidence "
                  f"{result.confidence:.2f}; the report states {fact.answer} on page {fact.page})")
            for c in (c for claim in result.claims for c in claim["citations"]):
                box = tuple(round(v) for v in c["bbox"]) if c["bbox"] else "the whole page"
                print(f"   cites page {c['page']}, region {box}: {' '.join(c['snippet'].split())[:90]}")
    store = args.dir / "store"
    print(f"\nstore: {store}  (try: {_command()} ask \"What was the rail passengers figure?\" --store {store})")
    return EXIT_OK


def _command() -> str:
    """How to run docrefrag again from this shell: `docrefrag` when the PATH finds this one, else its
    path (e.g. .venv/bin/docrefrag, not on the PATH until the venv is activated)."""
    import shutil

    script, found = Path(sys.argv[0]).resolve(), shutil.which("docrefrag")
    if found and Path(found).resolve() == script:
        return "docrefrag"
    where = script if script.name == "docrefrag" else None
    if where is None:
        return f"{sys.executable} -m docrefrag"
    return str(where.relative_to(Path.cwd())) if where.is_relative_to(Path.cwd()) else str(where)

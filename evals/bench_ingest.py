"""Ingest benchmark: pages/s (born-digital and OCR), peak RSS, index size, reopen time, search latency.

    python -m docrefrag.evals.bench_ingest --docs ../shared/data/mmlongbench/documents --store /tmp/bench-store \
        [--big-pdf 500] [--json out.json]

Ingests `--docs` into a fresh store (through the same Ingestor as `docrefrag ingest`), then reopens the
store in a fresh process and times searches within one document. `--big-pdf N` also ingests one
N-page PDF (built by concatenating the documents' pages) into a second fresh store and reports the
peak RSS of the whole process tree (main process + page-parsing workers) while it ingests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from docrefrag.evals.measure import PeakRSS, machine


def ingest(paths: list[Path], store_dir: Path) -> tuple[list, float, int]:
    """As `docrefrag ingest` does it (the branch health of each new document measured at the end)."""
    from docrefrag.core.text_embedder import TextEmbedder
    from docrefrag.indexes.ingest import Ingestor
    from docrefrag.indexes.store import Store

    shutil.rmtree(store_dir, ignore_errors=True)
    with Store(store_dir, create=True) as store, PeakRSS() as rss, \
            Ingestor(store, show_progress=True, embedder=TextEmbedder.default()) as ing:
        start = time.perf_counter()
        results = ing.ingest(paths)
        seconds = time.perf_counter() - start
    return results, seconds, rss.peak


def dir_size(path: Path) -> int:
    """Bytes allocated on disk (sparse files count what they use)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


_REOPEN = """
import json, sys, time
t0 = time.perf_counter()
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store
t_import = time.perf_counter() - t0
t1 = time.perf_counter()
store = Store(sys.argv[1])
docs = store.catalog.documents()
store.visual.count()
store.bm25.index()
t_index = time.perf_counter() - t1
t_open = time.perf_counter() - t0
t2 = time.perf_counter()
from docrefrag.core.text_embedder import TextEmbedder
searcher = HybridSearcher(store, TextEmbedder.default())
t_model = time.perf_counter() - t2
t3 = time.perf_counter()
searcher.search("revenue growth by region", k=5, doc_ids=[docs[0].doc_id])
t_first = time.perf_counter() - t3
queries = sys.argv[2].split("|")
queries *= max(int(sys.argv[3]), -(-2 * len(docs) // len(queries)))  # every document searched at least twice
lat, first_of_doc, seen = [], [], {docs[0].doc_id}
for i, q in enumerate(queries):
    doc = docs[i % len(docs)].doc_id
    t = time.perf_counter(); searcher.search(q, k=5, doc_ids=[doc]); dt = time.perf_counter() - t
    (lat if doc in seen else first_of_doc).append(dt)
    seen.add(doc)
import psutil
print(json.dumps({"open_s": t_open, "import_s": t_import, "index_open_s": t_index, "model_load_s": t_model,
                  "first_search_s": t_first, "latencies_s": lat, "first_of_document_s": first_of_doc,
                  "rss_mb": psutil.Process().memory_info().rss / 1e6}))
"""

QUERIES = [
    "total revenue in 2023", "number of employees by region", "table of survey results", "chart of market share",
    "conclusion of the study", "contact information and address", "figure showing the architecture",
    "percentage of respondents who agree", "financial statements balance sheet", "list of authors and affiliations",
]


def reopen_and_search(store_dir: Path, repeats: int = 5) -> dict:
    """Open times, and the searches' p50/p95 in ms: each document's first search apart from the later
    ones (the queries visit the documents in turn)."""
    out = subprocess.run([sys.executable, "-c", _REOPEN, str(store_dir), "|".join(QUERIES), str(repeats)],
                         capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    for key, name in (("latencies_s", "search"), ("first_of_document_s", "first_search_of_a_document")):
        lat = sorted(row.pop(key))
        if lat:
            row[f"{name}_p50_ms"] = lat[len(lat) // 2] * 1000
            row[f"{name}_p95_ms"] = lat[int(len(lat) * 0.95)] * 1000
    return row


def write_synthetic(folder: Path, pages: int, per_doc: int = 135) -> None:
    """Generated annual reports (`synthetic_report.sample_report`) of `per_doc` pages, `pages` in all."""
    from docrefrag.core.synthetic_report import sample_report

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(-(-pages // per_doc)):
        sample_report(folder / f"report-{i:03d}.pdf", pages=per_doc, seed=i, title=f"Annual Report {2000 + i}")


def build_big_pdf(docs: Path, pages: int, out: Path) -> Path:
    from docrefrag.core.pdf import pymupdf

    big = pymupdf.open()
    for pdf in sorted(docs.glob("*.pdf")):
        with pymupdf.open(pdf) as src:
            if any(len(page.get_text("words")) < 5 for page in src):  # born-digital documents only
                continue
            big.insert_pdf(src, to_page=min(len(src), pages - len(big)) - 1)
        if len(big) >= pages:
            break
    big.save(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--big-pdf", type=int, default=0, help="also ingest one PDF of this many pages (peak RSS)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only-big-pdf", action="store_true", help="skip the corpus ingest (memory check only)")
    parser.add_argument("--only-reopen", action="store_true", help="only reopen and search an existing --store")
    parser.add_argument("--synthetic", type=int, default=0, metavar="PAGES",
                        help="first write generated reports of about this many pages in all into --docs")
    args = parser.parse_args()
    if args.only_reopen:
        print(json.dumps(reopen_and_search(args.store), indent=2))
        return
    if args.synthetic:
        write_synthetic(args.docs, args.synthetic)
    if args.only_big_pdf:
        with tempfile.TemporaryDirectory() as tmp:
            big = build_big_pdf(args.docs, args.big_pdf, Path(tmp) / "big.pdf")
            res, secs, peak_big = ingest([big], Path(tmp) / "store")
        row = {"date": date.today().isoformat(), "machine": machine(),
               "big_pdf_pages": res[0].pages, "big_pdf_ocr_pages": res[0].ocr_pages, "big_pdf_seconds": secs,
               "big_pdf_pages_per_s": res[0].pages / secs, "big_pdf_peak_pss_mb": peak_big / 1e6}
        print(json.dumps(row, indent=2))
        if args.json:
            args.json.write_text(json.dumps(row, indent=2))
        return

    results, seconds, peak = ingest([args.docs], args.store)
    ok = [r for r in results if r.status != "failed"]
    born = [r for r in ok if r.ocr_pages == 0]
    scanned = [r for r in ok if r.ocr_pages == r.pages]
    row = {
        "date": date.today().isoformat(), "machine": machine(),
        "documents": len(ok), "failed": len(results) - len(ok), "pages": sum(r.pages for r in ok),
        "ocr_pages": sum(r.ocr_pages for r in ok), "seconds": seconds,
        "pages_per_s": sum(r.pages for r in ok) / seconds,
        "born_digital_pages_per_s": sum(r.pages for r in born) / sum(r.seconds for r in born) if born else None,
        "ocr_pages_per_s": sum(r.pages for r in scanned) / sum(r.seconds for r in scanned) if scanned else None,
        "peak_pss_mb": peak / 1e6, "store_mb": dir_size(args.store) / 1e6,
        "visual_mb": dir_size(args.store / "visual") / 1e6,
    }
    row.update({f"reopen_{k}": v for k, v in reopen_and_search(args.store).items()})
    if args.big_pdf:
        with tempfile.TemporaryDirectory() as tmp:
            big = build_big_pdf(args.docs, args.big_pdf, Path(tmp) / "big.pdf")
            res, secs, peak_big = ingest([big], Path(tmp) / "store")
            row.update({"big_pdf_pages": res[0].pages, "big_pdf_seconds": secs,
                        "big_pdf_pages_per_s": res[0].pages / secs, "big_pdf_peak_pss_mb": peak_big / 1e6})
    print(json.dumps(row, indent=2))
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()

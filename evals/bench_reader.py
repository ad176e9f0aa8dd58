"""Reader benchmark: time-to-first-token, time per output token and peak memory of the Doc-REFRAG
reader in its modes, in one process on the same pages and question.

    docrefrag bench reader --pages 20 [--json] [--store DIR --doc ID]

Modes: `full` (every chunk expanded into its region's words, uncapped: the pages' whole text in the
decoder's own tokens), `compressed` (one embedding per chunk: m/k per page) and `selective`
(compressed, with the selector's top floor(p*n*L) chunks expanded into their words, as `ask` reads).
Every mode builds its input through `DocRefragReader.build`. Without `--store` the pages are
generated (a synthetic report, parsed and encoded by the default encoder), so the benchmark runs on
a fresh install. The time to first token
counts everything from the page tokens to the first decoded token: selection, building the input
and the decoder's prefill. Output tokens are forced (no stop) so every mode decodes the same count.
For k other than the checkpoint's, the projector and selector are untrained (timing only).
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np
import torch

from docrefrag.core.selector import AllSelector, NoneSelector
from docrefrag.evals.measure import PeakRSS, machine

QUESTION = "How many megawatts of solar capacity did the North region report, and in which year?"


def pdf_pages(pdf: Path) -> tuple[np.ndarray, list]:
    """(n, m, d) tokens of every page of a PDF, parsed and encoded by the default encoder as at ingest,
    and its pages (`PageInput`: size and words), without a store."""
    from docrefrag.core.page_encoder import default_encoder
    from docrefrag.indexes.pages import DocSource, PageParser, inspect_source

    encoder = default_encoder()
    source = DocSource("pdf", Path(pdf))
    parser = PageParser(source)
    try:
        pages = [parser.parse(i).to_input() for i in range(inspect_source(source)[0])]
    finally:
        parser.close()
    return np.stack([encoder.encode(page).tokens for page in pages]), pages


def generated_pages(n: int) -> tuple[np.ndarray, list]:
    """The tokens and pages (`pdf_pages`) of an n-page synthetic report."""
    from docrefrag.core.synthetic_report import sample_report

    with tempfile.TemporaryDirectory() as tmp:
        pdf = Path(tmp) / "bench.pdf"
        sample_report(pdf, pages=n, seed=7)
        return pdf_pages(pdf)


def stored_pages(store_dir: Path, doc_id: str, n: int) -> tuple[np.ndarray, list]:
    """(n, m, d) tokens of the document's first n pages and their records (size and words)."""
    from docrefrag.indexes.store import Store

    with Store(store_dir) as store:
        doc = store.catalog.find(store.catalog.resolve(doc_id))
        if doc.n_pages < n:
            raise ValueError(f"document {doc.doc_id} has {doc.n_pages} pages; pass --pages {doc.n_pages} or fewer")
        keys = [(doc.doc_id, i) for i in range(1, n + 1)]
        return store.pages.stacked_tokens(keys), [store.pages.get(*key) for key in keys]


def run_bench(tokens: np.ndarray, records: list, ks: list[int], p: float, new_tokens: int,
              checkpoint: Path | None) -> list[dict]:
    from docrefrag.core.checkpoint import checkpoint_reader_config, load_checkpoint
    from docrefrag.core.config import ReaderConfig
    from docrefrag.core.page_encoder import default_encoder
    from docrefrag.core.reader import DocRefragReader, load_decoder
    from docrefrag.core.weights import model_dir

    encoder = default_encoder()
    decoder, tokenizer = load_decoder(model_dir("smollm2"))
    base = checkpoint_reader_config(checkpoint) if checkpoint else None
    pages = torch.from_numpy(tokens)
    n = pages.shape[0]
    rows = []
    for k in ks:
        config = replace(base, k=k) if base else ReaderConfig(k=k)
        reader = DocRefragReader(decoder, tokenizer, config, encoder.embedder.embed_queries).eval()
        if checkpoint and base.k == k:
            load_checkpoint(reader, checkpoint, encoder.encoder_id)
        grid = round(pages.shape[1] ** 0.5)
        regions = reader.page_regions(records, grid)
        modes = ([("compressed", NoneSelector()), ("selective", None)]
                 + ([("full", AllSelector())] if k == ks[0] else []))
        # warm-up at full length: the first long prefill of a process pays for allocations and kernel set-up
        reader.answer(QUESTION, pages, regions, p=p, selector=NoneSelector(), max_new_tokens=2, stop=False)
        for mode, selector in modes:
            reader.config = replace(config, max_expanded_tokens=sys.maxsize) if mode == "full" else config
            with PeakRSS(interval=0.05) as rss:
                out = reader.answer(QUESTION, pages, regions, p=p, selector=selector, max_new_tokens=new_tokens,
                                    stop=False)
            rows.append({"mode": mode, "k": None if mode == "full" else k, "p": p if mode == "selective" else None,
                         "pages": n, "tokens": out.input_tokens, "tokens_per_page": round(out.input_tokens / n, 1),
                         "ttft_s": round(out.ttft_s, 3), "tpot_s": round(out.tpot_s, 4),
                         "output_tokens": out.output_tokens, "peak_pss_mb": round(rss.peak / 2**20),
                         "trained": bool(checkpoint and base.k == k)})
        decoder = reader.decoder.unload()  # strip this k's LoRA layers before the next reader adds its own
    return rows


def markdown(rows: list[dict]) -> str:
    full = next((r for r in rows if r["mode"] == "full"), None)
    lines = ["| mode | k | pages | input tokens | tokens/page | TTFT (s) | TTFT speed-up vs full | TPOT (s) "
             "| peak PSS (MB) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = f"{full['ttft_s'] / r['ttft_s']:.2f}x" if full else "-"
        lines.append(f"| {r['mode']} | {r['k'] or '-'} | {r['pages']} | {r['tokens']} | {r['tokens_per_page']} | "
                     f"{r['ttft_s']:.2f} | {speed} | {r['tpot_s']:.3f} | {r['peak_pss_mb']} |")
    return "\n".join(lines)


def bench(pages: int, store: Path | None, doc: str | None, ks: list[int], p: float, new_tokens: int,
          checkpoint: Path | None) -> list[dict]:
    start = time.perf_counter()
    tokens, records = stored_pages(store, doc, pages) if store else generated_pages(pages)
    rows = run_bench(tokens, records, ks, p, new_tokens, checkpoint)
    for r in rows:
        r["machine"] = f"{machine()}, {torch.get_num_threads()} torch threads, {date.today()}"
    rows[0]["setup_s"] = round(time.perf_counter() - start, 1)
    return rows

"""Reader benchmark: time-to-first-token, time per output token and peak memory of the Doc-REFRAG
reader in its modes, in one process on the same pages and question.

    docrefrag bench reader --pages 20 [--json] [--store DIR --doc ID]

Modes: `full` (every grid token fed, aligned one by one: m per page), `compressed` (one embedding
per chunk: m/k per page) and `selective` (compressed, with the selector's top floor(p*n*L) chunks
expanded in place). Without `--store` the pages are generated (a synthetic report, parsed and
encoded by the default encoder), so the benchmark runs on a fresh install. The time to first token
counts everything from the page tokens to the first decoded token: selection, building the input
and the decoder's prefill. Output tokens are forced (no stop) so every mode decodes the same count.
For k other than the checkpoint's, the projector/aligner/selector are untrained (timing only).
"""

from __future__ import annotations

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


def generated_pages(n: int) -> np.ndarray:
    """(n, m, d) tokens of an n-page synthetic report, parsed and encoded as at ingest."""
    from docrefrag.core.page_encoder import default_encoder
    from docrefrag.core.synthetic_report import sample_report
    from docrefrag.indexes.ingest import encode_document

    with tempfile.TemporaryDirectory() as tmp:
        pdf = Path(tmp) / "bench.pdf"
        sample_report(pdf, pages=n, seed=7)
        return encode_document(pdf, default_encoder())


def stored_pages(store_dir: Path, doc_id: str, n: int) -> np.ndarray:
    from docrefrag.indexes.store import Store

    with Store(store_dir) as store:
        doc = store.find(store.resolve(doc_id))
        if doc.n_pages < n:
            raise ValueError(f"document {doc.doc_id} has {doc.n_pages} pages; pass --pages {doc.n_pages} or fewer")
        return store.stacked_tokens([(doc.doc_id, i) for i in range(1, n + 1)])


def run_bench(tokens: np.ndarray, ks: list[int], p: float, new_tokens: int, checkpoint: Path | None) -> list[dict]:
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
        modes = ([("compressed", NoneSelector()), ("selective", None)]
                 + ([("full", AllSelector())] if k == ks[0] else []))
        # warm-up at full length: the first long prefill of a process pays for allocations and kernel set-up
        reader.answer(QUESTION, pages, p=p, selector=NoneSelector(), max_new_tokens=2, stop=False)
        for mode, selector in modes:
            with PeakRSS(interval=0.05) as rss:
                out = reader.answer(QUESTION, pages, p=p, selector=selector, max_new_tokens=new_tokens, stop=False)
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
    tokens = stored_pages(store, doc, pages) if store else generated_pages(pages)
    rows = run_bench(tokens, ks, p, new_tokens, checkpoint)
    for r in rows:
        r["machine"] = f"{machine()}, {torch.get_num_threads()} torch threads, {date.today()}"
    rows[0]["setup_s"] = round(time.perf_counter() - start, 1)
    return rows

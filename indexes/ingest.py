"""Ingest documents into a store: discover sources, hash, parse pages in worker processes, encode,
index, commit page by page. Resumable after a kill; a changed file replaces its old version.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal

from tqdm import tqdm

from docrefrag_core.chunking import retrieval_vectors
from docrefrag_core.page_encoder import PageEncoder
from indexes.errors import IngestError
from indexes.pages import IMAGE_SUFFIXES, DocSource, PageParser, ParsedPage, image_folder_source, page_count
from indexes.store import Store

logger = logging.getLogger(__name__)

Status = Literal["added", "replaced", "resumed", "unchanged", "failed"]
RETRIEVAL_K = 3  # cells per retrieval chunk (108 vectors per page), see docrefrag_core.chunking


@dataclass
class IngestResult:
    source: str
    status: Status
    doc_id: str | None = None
    pages: int = 0
    ocr_pages: int = 0
    failed_pages: int = 0
    seconds: float = 0.0
    message: str = ""
    timings: dict = field(default_factory=dict)


def discover(paths: Iterable[Path | str]) -> tuple[list[DocSource], list[IngestResult]]:
    """PDF files, folders of PDFs (recursively), and folders of page images (one document each)."""
    sources: list[DocSource] = []
    errors: list[IngestResult] = []
    for raw in paths:
        path = Path(raw).expanduser()
        try:
            if path.is_file():
                if path.suffix.lower() != ".pdf":
                    raise IngestError(f"{path}: unsupported file type {path.suffix or '(none)'!r}; docrefrag ingests "
                                      "PDF files and folders of page images (PNG/JPEG)")
                sources.append(DocSource("pdf", path.resolve()))
            elif path.is_dir():
                found = _scan_folder(path.resolve())
                if not found:
                    raise IngestError(f"{path}: no PDF files or page images in this folder")
                sources.extend(found)
            else:
                raise IngestError(f"{path}: no such file or folder; check the path")
        except IngestError as e:
            errors.append(IngestResult(str(path), "failed", message=str(e)))
    return sources, errors


def _scan_folder(folder: Path) -> list[DocSource]:
    found: list[DocSource] = []
    entries = sorted(folder.iterdir())
    if any(p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES for p in entries):
        found.append(image_folder_source(folder))
    found += [DocSource("pdf", p) for p in entries if p.is_file() and p.suffix.lower() == ".pdf"]
    for sub in (p for p in entries if p.is_dir() and not p.name.startswith(".")):
        found += _scan_folder(sub)
    return found


def content_hash(source: DocSource) -> tuple[str, int]:
    """(doc id = first 16 hex digits of the sha256 of the content, size in bytes)."""
    h = hashlib.sha256()
    size = 0
    files = [source.path] if source.kind == "pdf" else list(source.files)
    for path in files:
        if source.kind == "images":
            h.update(path.name.encode() + b"\0")
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
                size += len(block)
    return h.hexdigest()[:16], size


# ---------------------------------------------------------------------- worker side

_parser: PageParser | None = None


def _parse_in_worker(source: DocSource, index: int) -> ParsedPage:
    global _parser
    if _parser is None or _parser.source != source:
        if _parser is not None:
            _parser.close()
        _parser = PageParser(source)
    start = time.perf_counter()
    parsed = _parser.parse(index)
    parsed.timings["parse"] = time.perf_counter() - start
    return parsed


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# ---------------------------------------------------------------------- main side


class Ingestor:
    """Runs ingests into one store with one encoder and one pool of page-parsing workers."""

    def __init__(self, store: Store, encoder: PageEncoder, workers: int | None = None, show_progress: bool = True) -> None:
        self.store, self.encoder, self.show_progress = store, encoder, show_progress
        self.workers = workers or max(1, min(os.cpu_count() or 1, 4))
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "Ingestor":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    @property
    def pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")  # no fork after torch has started its threads
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_worker_init)
        return self._pool

    def ingest(self, paths: Iterable[Path | str]) -> list[IngestResult]:
        sources, results = discover(paths)
        self.store.check_encoder(self.encoder.encoder_id, self.encoder.text_dim)
        self.store.collect_garbage()
        for source in sources:
            start = time.perf_counter()
            try:
                result = self._ingest_one(source)
            except IngestError as e:
                result = IngestResult(str(source.path), "failed", message=str(e))
            result.seconds = time.perf_counter() - start
            results.append(result)
        if any(r.status in ("added", "replaced", "resumed") for r in results):
            self.store.rebuild_bm25()
        return results

    def _ingest_one(self, source: DocSource) -> IngestResult:
        doc_id, size = content_hash(source)
        known = self.store.find(doc_id)
        if known is not None and known.status == "ready":
            return IngestResult(str(source.path), "unchanged", doc_id, known.n_pages, known.ocr_pages, known.failed_pages)
        n_pages = page_count(source)
        replaces = any(d.source == str(source.path) and d.doc_id != doc_id for d in self.store.documents())
        self.store.begin_document(doc_id, source.name, str(source.path), source.kind, n_pages, size)
        done = self.store.pages_done(doc_id)
        todo = [i for i in range(n_pages) if i + 1 not in done]
        timings = {"parse": 0.0, "encode": 0.0, "index": 0.0}
        bar = tqdm(total=n_pages, initial=n_pages - len(todo), unit="page", desc=source.name[:40],
                   disable=not self.show_progress, leave=False)
        in_flight: deque[Future] = deque()
        pending = iter(todo)
        try:
            for index in pending:
                in_flight.append(self.pool.submit(_parse_in_worker, source, index))
                if len(in_flight) >= 2 * self.workers:
                    self._commit(doc_id, in_flight.popleft().result(), timings)
                    bar.update()
            while in_flight:
                self._commit(doc_id, in_flight.popleft().result(), timings)
                bar.update()
        finally:
            bar.close()
            for f in in_flight:
                f.cancel()
        self.store.finish_document(doc_id)
        info = self.store.find(doc_id)
        status: Status = "resumed" if done else ("replaced" if replaces else "added")
        return IngestResult(str(source.path), status, doc_id, info.n_pages, info.ocr_pages, info.failed_pages,
                            timings=timings)

    def _commit(self, doc_id: str, parsed: ParsedPage, timings: dict) -> None:
        timings["parse"] += parsed.timings.get("parse", 0.0)
        start = time.perf_counter()
        tokens = self.encoder.encode(parsed.to_input()) if parsed.error is None else None
        timings["encode"] += time.perf_counter() - start
        start = time.perf_counter()
        if tokens is not None:
            pooled, vectors, _ = retrieval_vectors(tokens.tokens, tokens.word_counts, self.encoder.text_dim, RETRIEVAL_K)
            self.store.visual.upsert_page(doc_id, parsed.page, pooled, vectors)
        self.store.add_page(doc_id, parsed, tokens)
        timings["index"] += time.perf_counter() - start

"""Ingest documents into a store: discover sources, hash, parse pages in worker processes, encode,
index, commit page by page. Resumable after a kill; a changed file replaces its old version.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import signal
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from docrefrag.core.chunking import retrieval_vectors
from docrefrag.core.page_encoder import PageEncoder, PageTokens, default_encoder
from docrefrag.indexes.discovery import IngestResult, Status, discover, unreadable
from docrefrag.indexes.errors import EncoderError, IngestError, StoreError
from docrefrag.indexes.pages import (
    DocSource,
    PageParser,
    ParsedPage,
    failed_page,
    inspect_source,
)
from docrefrag.indexes.store import Store
from docrefrag.indexes.writer import IngestLock

logger = logging.getLogger(__name__)

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
# Each worker parses AND encodes its pages with its own single-threaded copy of the encoder: on 2
# cores two such processes kept both cores busy, where one process embedding with 2 torch threads
# used about one core (small batches) and left the parsers waiting.

EncoderFactory = Callable[[], PageEncoder]  # picklable, zero arguments (a module-level function)


@dataclass
class PageResult:
    parsed: ParsedPage  # without its image (it stays in the worker)
    tokens: PageTokens | None  # None when the page failed to parse
    encoder_id: str
    text_dim: int
    seconds: dict


_parser: PageParser | None = None
_encoder: PageEncoder | None = None
_encoder_error: str | None = None


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Ctrl-C held back (blocked, not ignored) while a submit may start worker processes: they inherit
    the blocked signal and ignore it from their initializer on, so a Ctrl-C (sent to the whole process
    group) stops only this process, which reports it in one line, instead of every worker printing a
    traceback from the middle of its imports; one that arrives meanwhile is delivered here on leaving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _worker_init(encoder_factory: EncoderFactory) -> None:
    """Build the encoder; exit when the ingesting process dies (kill -9 leaves no orphaned workers)."""
    global _encoder, _encoder_error
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the ingesting process handles Ctrl-C (see _sigint_held)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    import torch

    torch.set_num_threads(1)
    try:
        _encoder = encoder_factory()
    except Exception as e:  # reported with the first page, as one line
        _encoder_error = f"the page encoder could not be built: {e}"
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _process_in_worker(source: DocSource, index: int) -> PageResult:
    global _parser
    if _encoder is None:
        raise EncoderError(_encoder_error)
    if _parser is None or _parser.source != source:
        if _parser is not None:
            _parser.close()
        _parser = PageParser(source)
    start = time.perf_counter()
    parsed = _parser.parse(index)
    mid = time.perf_counter()
    tokens = _encoder.encode(parsed.to_input()) if parsed.error is None else None
    parsed.image = None
    return PageResult(parsed, tokens, _encoder.encoder_id, _encoder.text_dim,
                      {"parse": mid - start, "encode": time.perf_counter() - mid})


def encode_document(pdf: Path, encoder: PageEncoder) -> np.ndarray:
    """(n, m, d) tokens of every page of a PDF, parsed and encoded in this process as at ingest
    (for benchmarks and evaluations that need no store)."""
    source = DocSource("pdf", Path(pdf))
    n_pages, _ = inspect_source(source)
    parser = PageParser(source)
    try:
        return np.stack([encoder.encode(parser.parse(i).to_input()).tokens for i in range(n_pages)])
    finally:
        parser.close()


# ---------------------------------------------------------------------- main side


def check_workers(workers: int | None) -> None:
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 1 (or 0 for the default: the CPU count, at most 4), got {workers}")


class Ingestor:
    """Runs ingests into one store with one encoder and one pool of page-parsing workers."""

    def __init__(self, store: Store, encoder_factory: EncoderFactory = default_encoder, workers: int | None = None,
                 show_progress: bool = True, embedder=None) -> None:
        """`embedder` (the query embedder): when given, the retrieval branches' health on each new
        document is measured at the end of its ingest (indexes/health.py), so that its first search
        does not pay for it; without one, the first search measures it."""
        check_workers(workers)
        self.store, self.encoder_factory, self.show_progress = store, encoder_factory, show_progress
        self.embedder = embedder
        self.workers = workers or max(1, min(os.cpu_count() or 1, 4))
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Ingestor:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    @property
    def pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")  # no fork after torch has started its threads
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_worker_init,
                                             initargs=(self.encoder_factory,))
        return self._pool

    def ingest(self, paths: Iterable[Path | str]) -> list[IngestResult]:
        return self.ingest_sources(*discover(paths))

    def ingest_sources(self, sources: list[DocSource], failed: list[IngestResult]) -> list[IngestResult]:
        """Ingest what `discover` found; `failed` (its refusals) lead the results."""
        results = list(failed)
        with IngestLock(self.store.root) as self._lock:  # other processes see an ingest running now
            self.store.catalog.collect_garbage()
            for source in sources:
                start = time.perf_counter()
                try:
                    result = self._ingest_one(source)
                except IngestError as e:
                    result = IngestResult(str(source.path), "failed", message=str(e))
                result.seconds = time.perf_counter() - start
                results.append(result)
            self._lock.writing(None)
            if any(r.status in ("added", "replaced", "resumed") for r in results) or not self.store.bm25.saved():
                self.store.bm25.rebuild()
            if self.embedder is not None:
                self._measure_health()
        return results

    def _measure_health(self) -> None:
        """The branch health of every ready document that lacks it (`health.of_documents` measures
        only those, once per document)."""
        from docrefrag.indexes import health
        from docrefrag.indexes.hybrid import HybridSearcher

        try:
            health.of_documents(HybridSearcher(self.store, self.embedder), self.store.catalog.ready_ids())
        except (StoreError, sqlite3.Error, OSError, RuntimeError) as e:  # ingested all the same; a search measures it
            logger.warning("the branch health of the new documents was not measured (%s); their first search "
                           "will measure it", e)

    def _ingest_one(self, source: DocSource) -> IngestResult:
        try:
            doc_id, size = content_hash(source)
        except OSError as e:  # permissions, or removed since discovery: nothing was written yet
            raise IngestError(unreadable(source.path, e)) from e
        known = self.store.catalog.find(doc_id)
        moved = ""
        if known is not None and known.source != str(source.path) and not Path(known.source).exists():
            # the same content at a new place, the old one gone: a move; a later edit here must replace it
            self.store.catalog.relocate(doc_id, source.name, str(source.path))
            moved = f"moved here from {known.source}"
        if known is not None and known.status == "ready" and known.failed_pages == 0:
            return IngestResult(str(source.path), "unchanged", doc_id, known.n_pages, known.ocr_pages, 0, message=moved)
        n_pages, warning = inspect_source(source)
        replaces = any(d.source == str(source.path) and d.doc_id != doc_id for d in self.store.catalog.documents())
        self.store.catalog.begin(doc_id, source.name, str(source.path), source.kind, n_pages, size)
        self._lock.writing(doc_id)
        done = self.store.pages.done(doc_id)
        todo = [i for i in range(n_pages) if i + 1 not in done]
        timings = {"parse": 0.0, "encode": 0.0, "index": 0.0}
        bar = tqdm(total=n_pages, initial=n_pages - len(todo), unit="page", desc=source.name[:40],
                   disable=not self.show_progress, leave=False)
        try:
            self._run_pages(doc_id, source, todo, timings, bar)
        except BaseException:
            if known is None:  # failed or stopped before its first page: not a document to resume
                self.store.catalog.forget_unstarted(doc_id)
            raise
        finally:
            bar.close()
        self.store.catalog.finish(doc_id)
        info = self.store.catalog.find(doc_id)
        status: Status = "resumed" if known is not None else ("replaced" if replaces else "added")
        errors = self.store.pages.errors(doc_id)
        notes = [note for note in (moved, warning) if note]
        notes += errors[:3] + ([f"and {len(errors) - 3} more failed pages"] if len(errors) > 3 else [])
        return IngestResult(str(source.path), status, doc_id, info.n_pages, info.ocr_pages, info.failed_pages,
                            message="; ".join(notes), timings=timings)

    def _run_pages(self, doc_id: str, source: DocSource, todo: list[int], timings: dict, bar: tqdm) -> None:
        """Parse and encode pages in the pool, at most two per worker in flight, committing each as it
        comes back. A crashed worker (a segfault in a native library, the OOM killer) breaks the whole
        pool and every page in flight with it: those pages are retried one at a time in a new pool, and
        the one that crashes alone is recorded as failed while the rest of the document goes on."""
        queue, suspects = deque(todo), set()
        in_flight: deque[tuple[int, Future]] = deque()
        try:
            while queue or in_flight:
                while queue and len(in_flight) < 2 * self.workers and not (in_flight and queue[0] in suspects):
                    future = self._submit(source, queue[0], bool(in_flight))
                    if future is None:
                        break
                    in_flight.append((queue.popleft(), future))
                    if in_flight[-1][0] in suspects:
                        break  # a suspect runs alone so that a crash names it
                index, future = in_flight.popleft()
                try:
                    result = future.result()
                except BrokenProcessPool as e:
                    self._drop_pool()
                    if index in suspects and not in_flight:
                        logger.warning("page %d crashed its worker process: %s", index + 1, e)
                        self.store.pages.add(doc_id,
                                            failed_page(index + 1, f"page {index + 1} crashed its worker process"),
                                            None)
                        bar.update()
                        continue
                    retry = [index] + [i for i, _ in in_flight]
                    in_flight.clear()
                    suspects.update(retry)
                    queue.extendleft(reversed(retry))
                    continue
                self._commit(doc_id, result, timings)
                bar.update()
        finally:
            for _, f in in_flight:
                f.cancel()

    def _submit(self, source: DocSource, index: int, busy: bool) -> Future | None:
        """Submit one page; None when the pool has broken under pages already in flight (their results
        say so); a pool found broken with nothing in flight is replaced."""
        try:
            with _sigint_held():
                return self.pool.submit(_process_in_worker, source, index)
        except BrokenProcessPool:
            if busy:
                return None
            self._drop_pool()
            with _sigint_held():
                return self.pool.submit(_process_in_worker, source, index)

    def _drop_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _commit(self, doc_id: str, result: PageResult, timings: dict) -> None:
        for key, value in result.seconds.items():
            timings[key] += value
        start = time.perf_counter()
        self.store.meta.check_encoder(result.encoder_id, result.text_dim)
        if result.tokens is not None:
            tokens = result.tokens
            pooled, vectors, _ = retrieval_vectors(tokens.tokens, tokens.word_counts, result.text_dim)
            self.store.visual.upsert_page(doc_id, result.parsed.page, pooled, vectors)
        self.store.pages.add(doc_id, result.parsed, result.tokens)
        timings["index"] += time.perf_counter() - start

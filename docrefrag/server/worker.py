"""The one thread that uses the store: ingests, searches and asks run on it one at a time, in the
order they came, so a search sent during an ingest waits for it instead of failing with "the store
is busy" (the embedded visual index admits one user, and the catalog's SQLite connection belongs to
the thread that opened it).

Reads that must not wait behind an ingest (the document list with its progress, page images, stored
runs) open the catalog afresh in the request's own thread (`fresh`): SQLite in WAL mode serves such
a second reader while the ingest writes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from docrefrag.api import DocRefrag

logger = logging.getLogger(__name__)
T = TypeVar("T")


class StoreWorker:
    """Holds the server's `DocRefrag` and runs every call on it on one thread, first come first served."""

    def __init__(self, store: Path | str, qdrant_url: str | None = None) -> None:
        self.store_path = Path(store).expanduser()
        self.qdrant_url = qdrant_url
        self.dr = DocRefrag(self.store_path, qdrant_url)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="docrefrag-store")
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        self._tasks: dict[int, tuple[str, Future]] = {}  # submitted and not finished, in order

    def ahead(self) -> list[str]:
        """What runs or waits on the store now, in order (what a new task would wait for)."""
        with self._lock:
            return [what for what, _ in self._tasks.values()]

    def submit(self, what: str, fn: Callable[[DocRefrag], T]) -> Future[T]:
        """Run `fn(dr)` on the store's thread after everything submitted before; `what` names it in `ahead`."""
        number = next(self._numbers)

        def run() -> T:
            try:
                return fn(self.dr)
            finally:
                with self._lock:
                    self._tasks.pop(number, None)

        with self._lock:
            future = self._pool.submit(run)
            self._tasks[number] = (what, future)
        return future

    async def run(self, what: str, fn: Callable[[DocRefrag], T]) -> T:
        """`submit`, awaited."""
        return await asyncio.wrap_future(self.submit(what, fn))

    def fresh(self) -> DocRefrag:
        """A second, short-lived `DocRefrag` over the same store, for catalog reads in the calling thread."""
        return DocRefrag(self.store_path, self.qdrant_url)

    def close(self) -> None:
        """Drop what waits, let the running task finish (an ingest stopped midway resumes at its next run),
        close the store on its own thread."""
        with self._lock:
            waiting = [(what, f) for what, f in self._tasks.values() if f.cancel()]
            running = [what for what, f in self._tasks.values() if f.running()]
        for what, _ in waiting:
            logger.warning("dropped at shutdown: %s", what)
        if running:
            logger.warning("waiting for %s to finish before the server stops", ", ".join(running))
        self._pool.submit(self.dr.close)
        self._pool.shutdown(wait=True)

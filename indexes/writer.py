"""Which process is ingesting into a store, so that others can tell an ingest running now from one
that was interrupted.

An ingest holds an exclusive lock on STORE/ingest.lock for as long as it runs; the file holds
{"pid": ..., "doc_id": ...}, the document being written. The operating system drops the lock when
the process dies (even by kill -9), so a lock that can be taken means that no ingest is running and a
partial document was interrupted; a lock that cannot be taken names the process that holds it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import portalocker  # a dependency of qdrant-client; cross-platform file lock

from docrefrag.indexes.errors import StoreError

LOCK_NAME = "ingest.lock"


class IngestLock:
    """Held by one ingest into the store at `root` (`with IngestLock(root) as lock: lock.writing(doc_id)`)."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LOCK_NAME
        self._file = None

    def __enter__(self) -> IngestLock:
        file = self.path.open("a+")
        try:
            portalocker.lock(file, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.exceptions.LockException:
            file.close()
            holder = ingest_in_progress(self.path.parent)
            pid = f" (PID {holder['pid']})" if holder and holder.get("pid") else ""
            raise StoreError(f"another ingest{pid} is writing the store at {self.path.parent}; wait for it to "
                             "finish, then rerun this one") from None
        self._file = file
        self.writing(None)
        return self

    def writing(self, doc_id: str | None) -> None:
        """Record the document this ingest is writing now."""
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps({"pid": os.getpid(), "doc_id": doc_id}))
        self._file.flush()

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            portalocker.unlock(self._file)
            self._file.close()
            self._file = None


def ingest_in_progress(root: Path) -> dict | None:
    """{"pid", "doc_id"} of the ingest writing the store at `root` now, or None when none runs."""
    path = Path(root) / LOCK_NAME
    try:
        file = path.open("r")
    except FileNotFoundError:
        return None
    with file:
        try:
            portalocker.lock(file, portalocker.LockFlags.SHARED | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.exceptions.LockException:  # held: an ingest runs
            try:
                return json.loads(file.read() or "{}") or {"pid": None, "doc_id": None}
            except json.JSONDecodeError:  # caught between its truncate and its write
                return {"pid": None, "doc_id": None}
        portalocker.unlock(file)
        return None

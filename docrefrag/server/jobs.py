"""Background ingests of uploads: each upload's documents are ingested on the store's thread (after
whatever was sent before), while `GET /documents` shows every upload as queued, ingesting (pages done
of pages, read from the catalog as the ingest commits them), done or failed, with the ingest's own
status and message.

The uploads are kept under STORE/uploads/JOB/ (the store records where each document came from, and
an interrupted ingest resumes from there); one that added nothing (already in the store, or failed)
is removed again.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from docrefrag.indexes.catalog import DocInfo
from docrefrag.server.security import Redactor
from docrefrag.server.uploads import Upload, keep
from docrefrag.server.worker import StoreWorker

logger = logging.getLogger(__name__)
JobState = Literal["queued", "ingesting", "done", "failed"]


@dataclass
class IngestJob:
    id: str
    name: str
    kind: str  # "pdf" or "images"
    doc_id: str
    n_pages: int
    state: JobState = "queued"
    status: str = ""  # the ingest's: added, resumed, unchanged, failed
    message: str = ""
    failed_pages: int = 0

    def public(self, docs: dict[str, DocInfo]) -> dict:
        """The job as `GET /documents` shows it, its progress from the catalog's row of its document."""
        doc = docs.get(self.doc_id)
        done = self.n_pages if self.state == "done" else doc.pages_done if doc is not None else 0
        return {**asdict(self), "pages_done": done}


class IngestJobs:
    """The server's uploads and their ingests, newest last."""

    def __init__(self, worker: StoreWorker, redact: Redactor, workers: int | None = None) -> None:
        self.worker, self.redact, self.workers = worker, redact, workers
        self._jobs: dict[str, IngestJob] = {}
        self._lock = threading.Lock()

    def all(self) -> list[IngestJob]:
        with self._lock:
            return list(self._jobs.values())

    def start(self, uploads: list[Upload]) -> list[IngestJob]:
        """Move the checked uploads into the store and queue their ingest (one run of `DocRefrag.ingest`)."""
        root = self.worker.store_path / "uploads"
        batch: list[tuple[IngestJob, Path]] = []
        for upload in uploads:
            job = IngestJob(uuid.uuid4().hex[:12], upload.name, upload.kind, upload.doc_id, upload.n_pages,
                            message=upload.note)
            batch.append((job, keep(upload, root / job.id)))
        with self._lock:
            self._jobs.update((job.id, job) for job, _ in batch)
        names = ", ".join(job.name for job, _ in batch)
        self.worker.submit(f"the ingest of {names}", lambda dr: self._ingest(dr, batch))
        return [job for job, _ in batch]

    def _ingest(self, dr, batch: list[tuple[IngestJob, Path]]) -> None:
        for job, _ in batch:
            job.state = "ingesting"
        error = "not ingested"
        try:
            results = {Path(r.source): r for r in dr.ingest([path for _, path in batch], workers=self.workers)}
        except Exception as e:  # the store refused (another process ingests), the encoder failed...
            logger.warning("ingest failed: %s", e)
            results, error = {}, self.redact(str(e))
        for job, path in batch:
            result = results.get(path)
            if result is None:
                job.state, job.status, job.message = "failed", "failed", error
            else:
                job.state = "failed" if result.status == "failed" else "done"
                job.status, job.failed_pages = result.status, result.failed_pages
                job.message = self.redact(result.message.replace(str(path), job.name))
            if job.status in ("failed", "unchanged"):  # nothing of it is in the store: its upload goes
                shutil.rmtree(path.parent, ignore_errors=True)

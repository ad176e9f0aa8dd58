"""The store's documents and its meta rows, in its SQLite catalog (STORE/catalog.sqlite).

The catalog database holds these tables, each owned by one part of ``Store`` (indexes/store.py):

    meta           schema, generation (bumped when the ready documents change), encoder and its dim,
                   store id, Qdrant URL: ``store.meta`` (`Meta`, here)
    documents      one row per document version: name, source, kind, pages, status ("ready"/"ingesting"):
                   ``store.catalog`` (`Catalog`, here)
    tombstones     retired documents whose vectors and renders are still to be removed: ``store.catalog``
    branch_health  each document's measured branch health: ``store.health`` (indexes/health.py), which drops
                   it when a page of the document is written or the document is finished or retired;
                   `Catalog.documents` lists it beside each document
    pages, tokens, chunks   each page's record, tokens and BM25 chunks: ``store.pages`` (indexes/page_table.py)
    elements, edges, graphs   the evidence graph: ``store.graphs`` (indexes/evidence_graph.py)
    plans          the experience memory: ``store.memory`` (indexes/memory_table.py)
    agent_instructions   the retrieval agent's instructions: ``store.instructions`` (indexes/instructions.py)

Consistency: ingest commits each page in one transaction after its vectors are upserted (idempotently:
point ids derive from (doc, page)), so a killed ingest resumes at the first missing page. A document becomes
searchable only when `Catalog.finish` marks it ready; the same transaction retires older versions of the same
source from every part and records them as tombstones, whose vectors and renders are removed afterwards (and
again at the next ingest if a kill came between).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from docrefrag.indexes import evidence_graph
from docrefrag.indexes.errors import StoreError, UnknownDocumentError
from docrefrag.indexes.health import VERSION as HEALTH_VERSION
from docrefrag.indexes.writer import ingest_in_progress

if TYPE_CHECKING:
    from docrefrag.indexes.health import HealthTable
    from docrefrag.indexes.memory_table import MemoryTable
    from docrefrag.indexes.page_table import PageTable
    from docrefrag.indexes.visual import VisualIndex

SCHEMA_VERSION = 1
META_SCHEMA = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY, name TEXT NOT NULL, source TEXT NOT NULL, kind TEXT NOT NULL,
    n_pages INTEGER NOT NULL, bytes INTEGER NOT NULL, status TEXT NOT NULL, added_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (doc_id TEXT PRIMARY KEY);
"""


@dataclass(frozen=True)
class DocInfo:
    doc_id: str
    name: str
    source: str
    kind: str
    n_pages: int
    status: str  # "ready" or "ingesting" (being written now when `writer_pid` is set; else interrupted: a rerun
    # of ingest resumes it)
    pages_done: int
    ocr_pages: int
    failed_pages: int
    bytes: int
    added_at: float
    health_measured: bool = False  # the branches' health on the document is recorded (indexes/health.py)
    health_sparse: float | None = None  # None: not measured, or not judged (short, little text)
    health_dense: float | None = None
    writer_pid: int | None = None  # the process ingesting this document now (indexes/writer.py)


def unfinished_summary(docs: list[DocInfo]) -> str:
    """'name: 40/120 pages (being ingested by PID N), ...' of documents not finished yet."""
    return ", ".join(f"{d.name}: {d.pages_done}/{d.n_pages} pages" + (f" (being ingested by PID {d.writer_pid})"
                                                                       if d.writer_pid else "") for d in docs)


class Meta:
    """The `meta` rows: what the store is (schema, id, encoder, where its vectors are) and its generation."""

    def __init__(self, db: sqlite3.Connection, root: Path) -> None:
        self.db, self.root = db, root
        self.db.executescript(META_SCHEMA)
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def bind(self, key: str, value: str) -> str:
        """The stored value of `key`, storing `value` first when there is none (the first process wins)."""
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (key, value))
        return self.get(key)

    @property
    def store_id(self) -> str:
        return self.get("store_id") or self.bind("store_id", os.urandom(6).hex())

    @property
    def generation(self) -> int:
        """Bumped whenever the ready documents change (what the BM25 file and the graph cache are of)."""
        return int(self.get("generation"))

    def bump_generation(self) -> None:
        """In the caller's transaction."""
        self.db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")

    def check_encoder(self, encoder_id: str, text_dim: int) -> None:
        """Bind the store to one page encoder; refuse tokens from another."""
        stored = self.get("encoder_id")
        if stored is None:
            with self.db:
                self.db.execute("INSERT INTO meta VALUES ('encoder_id', ?)", (encoder_id,))
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('text_dim', ?)", (str(text_dim),))
        elif stored != encoder_id:
            raise StoreError(f"the store at {self.root} holds tokens of encoder {stored!r}, not {encoder_id!r}; "
                             "use a new --store for this encoder")

    @property
    def encoder_id(self) -> str | None:
        return self.get("encoder_id")

    @property
    def text_dim(self) -> int:
        """The text embedder's width in the stored tokens (0 before any page was encoded)."""
        return int(self.get("text_dim") or 0)


class Catalog:
    """The store's documents: listed, resolved from what a user types, and taken through an ingest (begun,
    relocated, forgotten when nothing was stored, finished); finishing one retires the older versions of its
    source from every part (pages, evidence graph, experience memory, branch health, visual index)."""

    def __init__(self, db: sqlite3.Connection, root: Path, meta: Meta, pages: PageTable, memory: MemoryTable,
                 health: HealthTable, visual: Callable[[], VisualIndex]) -> None:
        self.db, self.root, self.meta, self.pages, self.memory, self.health = db, root, meta, pages, memory, health
        self.visual = visual
        self.db.executescript(SCHEMA)

    def documents(self) -> list[DocInfo]:
        rows = self.db.execute(
            """SELECT d.doc_id, d.name, d.source, d.kind, d.n_pages, d.status, COUNT(p.page),
                      COALESCE(SUM(p.ocr), 0), COALESCE(SUM(p.error IS NOT NULL), 0), d.bytes, d.added_at,
                      h.doc_id IS NOT NULL, h.sparse, h.dense
               FROM documents d LEFT JOIN pages p ON p.doc_id = d.doc_id
                    LEFT JOIN branch_health h ON h.doc_id = d.doc_id AND h.version = ?
               GROUP BY d.doc_id ORDER BY d.added_at, d.name""", (HEALTH_VERSION,)
        ).fetchall()
        writer = ingest_in_progress(self.root) or {}
        return [DocInfo(*r, writer_pid=writer.get("pid") if r[0] == writer.get("doc_id") and r[5] != "ready" else None)
                for r in rows]

    def ready_ids(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT doc_id FROM documents WHERE status = 'ready' ORDER BY doc_id")]

    def find(self, doc_id: str) -> DocInfo | None:
        return next((d for d in self.documents() if d.doc_id == doc_id), None)

    def resolve(self, doc: str) -> str:
        """A ready document's id from its id, a unique id prefix, or its file/folder name."""
        rows = self.db.execute(
            "SELECT doc_id FROM documents WHERE status = 'ready' AND (doc_id = ? OR name = ? OR doc_id LIKE ?)",
            (doc, doc, doc + "%"),
        ).fetchall()
        ids = sorted({r[0] for r in rows})
        if len(ids) == 1:
            return ids[0]
        if not ids:
            unfinished = [d for d in self.documents()
                          if d.status != "ready" and (d.doc_id.startswith(doc) or d.name == doc)]
            if unfinished:
                raise StoreError(f"{doc!r} is only partly ingested ({unfinished_summary(unfinished)}); "
                                 "rerun `docrefrag ingest` on it to finish")
            raise UnknownDocumentError(f"no document {doc!r} in the store at {self.root}; `docrefrag docs` lists them")
        raise StoreError(f"{doc!r} matches {len(ids)} documents ({', '.join(ids)}); pass a full doc id")

    def begin(self, doc_id: str, name: str, source: str, kind: str, n_pages: int, size: int) -> None:
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO documents VALUES (?, ?, ?, ?, ?, ?, 'ingesting', ?)",
                            (doc_id, name, source, kind, n_pages, size, time.time()))

    def forget_unstarted(self, doc_id: str) -> None:
        """Drop the record of a document that an ingest began but stored no page of (it failed or was
        stopped first): nothing to resume, so nothing may be listed as partly ingested."""
        with self.db:
            if not self.pages.numbers(doc_id):
                self.db.execute("DELETE FROM documents WHERE doc_id = ? AND status = 'ingesting'", (doc_id,))

    def relocate(self, doc_id: str, name: str, source: str) -> None:
        """The document's file was moved (or its folder renamed): record where it is now."""
        with self.db:
            self.db.execute("UPDATE documents SET name = ?, source = ? WHERE doc_id = ?", (name, source, doc_id))

    def finish(self, doc_id: str) -> list[str]:
        """Make `doc_id` searchable; retire older versions of its source. Returns the retired ids."""
        source = self.db.execute("SELECT source FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()[0]
        with self.db:
            old = [r[0] for r in self.db.execute(
                "SELECT doc_id FROM documents WHERE source = ? AND doc_id != ?", (source, doc_id))]
            for old_id in old:
                self._delete(old_id)
                self.db.execute("INSERT OR IGNORE INTO tombstones VALUES (?)", (old_id,))
            evidence_graph.finish(self.db, doc_id)
            self.db.execute("UPDATE documents SET status = 'ready' WHERE doc_id = ?", (doc_id,))
            self.health.drop(doc_id)  # e.g. measured while it resumed
            self.meta.bump_generation()
        self.collect_garbage()
        return old

    def collect_garbage(self) -> None:
        """Remove vectors and renders of retired documents (idempotent; safe to rerun after a kill)."""
        for (doc_id,) in self.db.execute("SELECT doc_id FROM tombstones").fetchall():
            self.visual().delete_doc(doc_id)
            self.pages.delete_renders(doc_id)
            with self.db:
                self.db.execute("DELETE FROM tombstones WHERE doc_id = ?", (doc_id,))

    def _delete(self, doc_id: str) -> None:
        """A retired version's rows in every part (in the caller's transaction)."""
        self.pages.delete(doc_id)
        self.health.drop(doc_id)
        self.db.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
        evidence_graph.delete(self.db, doc_id)
        self.memory.drop_orphans()  # the experience memory's plans asked over no document that is left

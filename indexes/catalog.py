"""The store's SQLite catalog (STORE/catalog.sqlite): its tables and the records read from them.

    documents      one row per document version: name, source, kind, pages, status ("ready"/"ingesting")
    pages          each page's size, OCR flag, error, markdown, words and blocks (JSON)
    tokens         each encoded page's tokens (float16) and word counts (int32), as blobs
    chunks         the BM25 text chunks of each page, with their boxes
    tombstones     retired documents whose vectors and renders are still to be removed
    branch_health  each document's measured branch health (indexes/health.py)
    elements, edges, graphs   the evidence graph: nodes, edges, which documents' graphs are built
                   (their schema and queries: indexes/evidence_graph.py)
    plans          the experience memory: each validated answer's plan (its schema and queries:
                   indexes/memory_table.py; what is remembered: graph/memory.py)
    meta           schema, generation (bumped when the ready documents change), encoder and its dim,
                   store id, Qdrant URL

``Store`` (indexes/store.py) opens it and reads and writes these rows; the experience memory's are
its part ``store.memory`` (indexes/memory_table.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from docrefrag.core.page import Block, Word

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY, name TEXT NOT NULL, source TEXT NOT NULL, kind TEXT NOT NULL,
    n_pages INTEGER NOT NULL, bytes INTEGER NOT NULL, status TEXT NOT NULL, added_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS pages (
    doc_id TEXT NOT NULL, page INTEGER NOT NULL, width REAL NOT NULL, height REAL NOT NULL,
    ocr INTEGER NOT NULL, n_words INTEGER NOT NULL, error TEXT, markdown TEXT NOT NULL,
    words TEXT NOT NULL, blocks TEXT NOT NULL, PRIMARY KEY (doc_id, page)
);
CREATE TABLE IF NOT EXISTS tokens (
    doc_id TEXT NOT NULL, page INTEGER NOT NULL, tokens BLOB NOT NULL, word_counts BLOB NOT NULL,
    PRIMARY KEY (doc_id, page)
);
CREATE TABLE IF NOT EXISTS chunks (
    doc_id TEXT NOT NULL, page INTEGER NOT NULL, chunk INTEGER NOT NULL, text TEXT NOT NULL,
    x0 REAL NOT NULL, y0 REAL NOT NULL, x1 REAL NOT NULL, y1 REAL NOT NULL, PRIMARY KEY (doc_id, page, chunk)
);
CREATE TABLE IF NOT EXISTS tombstones (doc_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS branch_health (
    doc_id TEXT PRIMARY KEY, version INTEGER NOT NULL, sparse REAL, dense REAL, queries INTEGER NOT NULL
);
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


@dataclass(frozen=True)
class PageRecord:
    doc_id: str
    page: int
    width: float
    height: float
    ocr: bool
    error: str | None
    markdown: str
    words: list[Word]
    blocks: list[Block]


@dataclass(frozen=True)
class ChunkRecord:
    doc_id: str
    page: int
    chunk: int
    text: str
    bbox: tuple[float, float, float, float]

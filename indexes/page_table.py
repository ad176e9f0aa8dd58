"""The store's pages: the `pages`, `tokens` and `chunks` tables of its catalog, and the page renders.

    pages     each page's size, OCR flag, error, markdown, words and blocks (JSON)
    tokens    each encoded page's tokens (float16) and word counts (int32), as blobs
    chunks    the BM25 text chunks of each page, with their boxes
    STORE/renders/DOC/N.jpg   144 dpi page renders

Ingest writes a page with `add`: the render file first, then one transaction for the page's rows and its
evidence-graph nodes (indexes/evidence_graph.py), which also drops the document's branch health
(`store.health`, measured on the old page), so a killed ingest leaves whole pages only. The reads serve the
reader (tokens), the answerer and the tools (markdown, regions), the citations (chunks, words) and the BM25
index (the ready documents' chunks). The Store exposes it as `store.pages`.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from docrefrag.core.page import Block, Word
from docrefrag.core.page_encoder import PageTokens
from docrefrag.indexes import evidence_graph
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.pages import ParsedPage

if TYPE_CHECKING:
    from docrefrag.indexes.catalog import Meta
    from docrefrag.indexes.evidence_graph import EvidenceGraphs
    from docrefrag.indexes.health import HealthTable

SCHEMA = """
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
"""


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


class PageTable:
    """The pages of a store's documents: their rows in the catalog database and their render files."""

    def __init__(self, db: sqlite3.Connection, root: Path, meta: Meta, graphs: EvidenceGraphs,
                 health: HealthTable) -> None:
        self.db, self.root, self.meta, self.graphs, self.health = db, root, meta, graphs, health
        self.db.executescript(SCHEMA)

    def get(self, doc_id: str, page: int) -> PageRecord:
        row = self.db.execute(
            "SELECT width, height, ocr, error, markdown, words, blocks FROM pages WHERE doc_id = ? AND page = ?",
            (doc_id, page),
        ).fetchone()
        if row is None:
            raise StoreError(f"no page {page} of document {doc_id} in the store")
        width, height, ocr, error, markdown, words, blocks = row
        return PageRecord(doc_id, page, width, height, bool(ocr), error, markdown,
                          [Word(*w) for w in json.loads(words)], [Block(*b) for b in json.loads(blocks)])

    def markdown(self, doc_id: str, page: int) -> str:
        """The page's markdown alone (no decoding of its words and blocks)."""
        row = self.db.execute("SELECT markdown FROM pages WHERE doc_id = ? AND page = ?", (doc_id, page)).fetchone()
        if row is None:
            raise StoreError(f"no page {page} of document {doc_id} in the store")
        return row[0]

    def numbers(self, doc_id: str) -> list[int]:
        """The document's stored pages, failed ones included."""
        return [r[0] for r in self.db.execute("SELECT page FROM pages WHERE doc_id = ? ORDER BY page", (doc_id,))]

    def done(self, doc_id: str) -> set[int]:
        """Pages stored without error (a failed page is retried by the next ingest)."""
        return {r[0] for r in self.db.execute("SELECT page FROM pages WHERE doc_id = ? AND error IS NULL", (doc_id,))}

    def errors(self, doc_id: str) -> list[str]:
        return [r[0] for r in self.db.execute(
            "SELECT error FROM pages WHERE doc_id = ? AND error IS NOT NULL ORDER BY page", (doc_id,))]

    def tokens(self, doc_id: str, page: int) -> PageTokens:
        row = self.db.execute("SELECT tokens, word_counts FROM tokens WHERE doc_id = ? AND page = ?",
                              (doc_id, page)).fetchone()
        if row is None:
            raise StoreError(f"no tokens for page {page} of document {doc_id}; re-ingest the document")
        counts = np.frombuffer(row[1], dtype=np.int32)
        tokens = np.frombuffer(row[0], dtype=np.float16).reshape(len(counts), -1).astype(np.float32)
        return PageTokens(tokens, counts.copy())

    def stacked_tokens(self, pages: list[tuple[str, int]]) -> np.ndarray:
        """(n, m, d) float32 tokens of the pages [(doc_id, page)], in order (what the reader reads)."""
        return np.stack([self.tokens(doc_id, page).tokens for doc_id, page in pages])

    def has_tokens(self) -> bool:
        """Some page was encoded, so the visual index holds its vectors."""
        return self.db.execute("SELECT 1 FROM tokens LIMIT 1").fetchone() is not None

    def chunk(self, doc_id: str, page: int, chunk: int) -> ChunkRecord:
        row = self.db.execute("SELECT text, x0, y0, x1, y1 FROM chunks WHERE doc_id = ? AND page = ? AND chunk = ?",
                              (doc_id, page, chunk)).fetchone()
        if row is None:
            raise StoreError(f"no chunk {chunk} on page {page} of document {doc_id}")
        return ChunkRecord(doc_id, page, chunk, row[0], tuple(row[1:]))

    def text_chunks(self, doc_id: str) -> list[tuple[int, str]]:
        """(page, text) of every BM25 chunk of the document, in page order."""
        return self.db.execute("SELECT page, text FROM chunks WHERE doc_id = ? ORDER BY page, chunk",
                               (doc_id,)).fetchall()

    def ready_chunks(self) -> sqlite3.Cursor:
        """(doc_id, page, chunk, text) of every chunk of the ready documents, in order (what BM25 indexes)."""
        return self.db.execute(
            """SELECT c.doc_id, c.page, c.chunk, c.text FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
               WHERE d.status = 'ready' ORDER BY c.doc_id, c.page, c.chunk"""
        )

    def regions(self, doc_id: str, page: int) -> list[ChunkRecord]:
        """The page's elements of the evidence graph (headings, paragraphs, tables, figures, captions, in
        reading order) as citable regions: `chunk` is the element's index on the page."""
        nodes = self.graphs.get(doc_id).nodes
        return [ChunkRecord(doc_id, page, index, el.text, el.bbox)
                for (p, index), el in sorted(nodes.items()) if p == page and index > 0]

    def render_path(self, doc_id: str, page: int) -> Path:
        return self.root / "renders" / doc_id / f"{page}.jpg"

    def add(self, doc_id: str, parsed: ParsedPage, tokens: PageTokens | None) -> None:
        """Write one page (render file first, then one transaction for its rows)."""
        if parsed.render_jpeg:
            path = self.render_path(doc_id, parsed.page)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(parsed.render_jpeg)
            os.replace(tmp, path)
        stored_words = [Word(w.text, round(w.x0, 2), round(w.y0, 2), round(w.x1, 2), round(w.y1, 2), w.block)
                        for w in parsed.words]  # as stored, so that a rebuild from the rows gives the same graph
        stored_blocks = [Block(b.kind, round(b.x0, 2), round(b.y0, 2), round(b.x1, 2), round(b.y1, 2))
                         for b in parsed.blocks]
        words = json.dumps([[w.text, w.x0, w.y0, w.x1, w.y1, w.block] for w in stored_words])
        blocks = json.dumps([[b.kind, b.x0, b.y0, b.x1, b.y1] for b in stored_blocks])
        with self.db:
            self.health.drop(doc_id)  # measured on the old page
            self.db.execute("DELETE FROM chunks WHERE doc_id = ? AND page = ?", (doc_id, parsed.page))
            self.db.executemany(
                "INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(doc_id, parsed.page, i, c.text, *c.bbox) for i, c in enumerate(parsed.chunks)],
            )
            if tokens is not None:
                self.db.execute("INSERT OR REPLACE INTO tokens VALUES (?, ?, ?, ?)",
                                (doc_id, parsed.page, tokens.tokens.astype(np.float16).tobytes(),
                                 tokens.word_counts.astype(np.int32).tobytes()))
            self.db.execute(
                "INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (doc_id, parsed.page, parsed.width, parsed.height, int(parsed.ocr), len(parsed.words),
                 parsed.error, parsed.markdown, words, blocks),
            )
            evidence_graph.write_page(self.db, doc_id, parsed.page, parsed.width, parsed.height, stored_words,
                                      stored_blocks, parsed.markdown,
                                      tokens.tokens.astype(np.float16) if tokens else None,  # as stored
                                      tokens.word_counts if tokens else None, self.meta.text_dim,
                                      failed=parsed.error is not None)

    def delete(self, doc_id: str) -> None:
        """The document's rows (in the caller's transaction); its renders go with `delete_renders`."""
        for table in ("chunks", "tokens", "pages"):
            self.db.execute(f"DELETE FROM {table} WHERE doc_id = ?", (doc_id,))

    def delete_renders(self, doc_id: str) -> None:
        shutil.rmtree(self.root / "renders" / doc_id, ignore_errors=True)

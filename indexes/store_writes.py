"""What ingest writes into a store: documents begun and finished, pages added, retired versions removed.

Consistency: every page is committed in one SQLite transaction after its vectors are upserted
(upserts are idempotent: point ids derive from (doc, page)), so a killed ingest resumes at the
first missing page. A document becomes searchable only when `finish_document` marks it ready; the
same transaction retires older versions of the same source (with the experience memory's plans asked
over them alone) and records them as tombstones, whose vectors and renders are removed afterwards
(and again at the next open if a kill came between).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import numpy as np

from docrefrag.core.page import Block, Word
from docrefrag.core.page_encoder import PageTokens
from docrefrag.indexes import evidence_graph
from docrefrag.indexes.catalog import DocInfo
from docrefrag.indexes.memory_table import MemoryTable
from docrefrag.indexes.pages import ParsedPage


class IngestWrites:
    """The ingest's writes, a part of ``Store`` (indexes/store.py): they use its catalog, folder and indexes."""

    db: sqlite3.Connection
    memory: MemoryTable
    root: Path
    text_dim: int

    def find(self, doc_id: str) -> DocInfo | None:
        return next((d for d in self.documents() if d.doc_id == doc_id), None)

    def begin_document(self, doc_id: str, name: str, source: str, kind: str, n_pages: int, size: int) -> None:
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO documents VALUES (?, ?, ?, ?, ?, ?, 'ingesting', ?)",
                            (doc_id, name, source, kind, n_pages, size, time.time()))

    def forget_unstarted(self, doc_id: str) -> None:
        """Drop the record of a document that an ingest began but stored no page of (it failed or was
        stopped first): nothing to resume, so nothing may be listed as partly ingested."""
        with self.db:
            if self.db.execute("SELECT 1 FROM pages WHERE doc_id = ? LIMIT 1", (doc_id,)).fetchone() is None:
                self.db.execute("DELETE FROM documents WHERE doc_id = ? AND status = 'ingesting'", (doc_id,))

    def relocate(self, doc_id: str, name: str, source: str) -> None:
        """The document's file was moved (or its folder renamed): record where it is now."""
        with self.db:
            self.db.execute("UPDATE documents SET name = ?, source = ? WHERE doc_id = ?", (name, source, doc_id))

    def pages_done(self, doc_id: str) -> set[int]:
        """Pages stored without error (a failed page is retried by the next ingest)."""
        return {r[0] for r in self.db.execute("SELECT page FROM pages WHERE doc_id = ? AND error IS NULL", (doc_id,))}

    def page_errors(self, doc_id: str) -> list[str]:
        return [r[0] for r in self.db.execute(
            "SELECT error FROM pages WHERE doc_id = ? AND error IS NOT NULL ORDER BY page", (doc_id,))]

    def add_page(self, doc_id: str, parsed: ParsedPage, tokens: PageTokens | None) -> None:
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
            self.db.execute("DELETE FROM branch_health WHERE doc_id = ?", (doc_id,))  # measured on the old page
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
                                      tokens.word_counts if tokens else None, self.text_dim,
                                      failed=parsed.error is not None)

    def finish_document(self, doc_id: str) -> list[str]:
        """Make `doc_id` searchable; retire older versions of its source. Returns the retired ids."""
        source = self.db.execute("SELECT source FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()[0]
        with self.db:
            old = [r[0] for r in self.db.execute(
                "SELECT doc_id FROM documents WHERE source = ? AND doc_id != ?", (source, doc_id))]
            for old_id in old:
                self._delete_rows(old_id)
                self.db.execute("INSERT OR IGNORE INTO tombstones VALUES (?)", (old_id,))
            evidence_graph.finish(self.db, doc_id)
            self.db.execute("UPDATE documents SET status = 'ready' WHERE doc_id = ?", (doc_id,))
            self.db.execute("DELETE FROM branch_health WHERE doc_id = ?", (doc_id,))  # e.g. measured while it resumed
            self._bump_generation()
        self.collect_garbage()
        return old

    def upgrade_graphs(self) -> list[str]:
        """Rebuild the evidence graph of each ready document whose graph is missing or older; their names."""
        done = []
        for d in self.documents():
            if d.status == "ready" and not evidence_graph.built(self.db, d.doc_id):
                evidence_graph.rebuild(self.db, d.doc_id, self.text_dim)
                done.append(d.name)
        return done

    def collect_garbage(self) -> None:
        """Remove vectors and renders of retired documents (idempotent; safe to rerun after a kill)."""
        for (doc_id,) in self.db.execute("SELECT doc_id FROM tombstones").fetchall():
            self.visual.delete_doc(doc_id)
            shutil.rmtree(self.root / "renders" / doc_id, ignore_errors=True)
            with self.db:
                self.db.execute("DELETE FROM tombstones WHERE doc_id = ?", (doc_id,))

    def _delete_rows(self, doc_id: str) -> None:
        for table in ("chunks", "tokens", "pages", "branch_health", "documents"):
            self.db.execute(f"DELETE FROM {table} WHERE doc_id = ?", (doc_id,))
        evidence_graph.delete(self.db, doc_id)
        self.memory.drop_orphans()  # the experience memory's plans asked over no document that is left

    def _bump_generation(self) -> None:
        self.db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")

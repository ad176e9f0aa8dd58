"""The store directory: a SQLite catalog, page renders, the BM25 index and the visual index.

    STORE/catalog.sqlite   documents, pages (words, blocks, markdown), page tokens, BM25 chunks,
                           each document's branch health, the evidence graph (indexes/catalog.py),
                           the experience memory (`store.memory`, indexes/memory_table.py)
    STORE/renders/DOC/N.jpg   144 dpi page renders
    STORE/bm25.npz         BM25 term counts of the ready documents (rebuilt when they change)
    STORE/visual/          embedded Qdrant (qdrant-edge) shard, unless a server URL is given

``Store`` opens and checks the folder and serves its reads; the ingest's writes, and how a killed
ingest stays consistent, are in indexes/store_writes.py (mixed into ``Store``).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path

import numpy as np

from docrefrag.core.page import Block, Word
from docrefrag.core.page_encoder import PageTokens
from docrefrag.indexes.bm25 import BM25Index
from docrefrag.indexes.catalog import SCHEMA, SCHEMA_VERSION, ChunkRecord, DocInfo, PageRecord, unfinished_summary
from docrefrag.indexes.errors import StoreError, UnknownDocumentError
from docrefrag.indexes.evidence_graph import SCHEMA as GRAPH_SCHEMA
from docrefrag.indexes.evidence_graph import DocumentGraph
from docrefrag.indexes.health import VERSION as HEALTH_VERSION
from docrefrag.indexes.memory_table import MemoryTable
from docrefrag.indexes.store_writes import IngestWrites
from docrefrag.indexes.writer import ingest_in_progress

logger = logging.getLogger(__name__)


class Store(IngestWrites):
    def __init__(self, root: Path | str, qdrant_url: str | None = None, qdrant_api_key: str | None = None,
                 create: bool = False) -> None:
        self.root = Path(root).expanduser()
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{self.root} is a file, not a store folder; pass a folder (new or existing) to --store")
        if not (self.root / "catalog.sqlite").is_file():
            if not create:
                raise StoreError(f"no docrefrag store at {self.root}; "
                                 f"create one with `docrefrag ingest PATH --store {self.root}`")
            self.root.mkdir(parents=True, exist_ok=True)
        catalog = self.root / "catalog.sqlite"
        try:
            self.db = sqlite3.connect(catalog, timeout=30.0)
        except sqlite3.OperationalError as e:
            raise StoreError(f"cannot open the store's catalog {catalog} ({e}); check the folder's permissions") from e
        try:
            self._open_catalog()
            self.memory = MemoryTable(self.db)  # the experience memory's plans
            self._check(qdrant_url)
        except sqlite3.OperationalError as e:  # locked, read-only, disk full: the catalog itself may be fine
            self.db.close()
            raise StoreError(f"cannot use the store's catalog {catalog} ({e}); check that the folder is writable, "
                             "has free space and is on a local disk, and that no other process holds it") from e
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise StoreError(f"the store's catalog {catalog} is damaged ({e}); the store cannot be read: move the "
                             "folder aside and ingest the documents into a new store") from e
        except BaseException:
            self.db.close()
            raise
        self.qdrant_api_key = qdrant_api_key
        self._visual = None
        self._bm25: tuple[int, BM25Index] | None = None
        self._graphs: dict[str, tuple[str | None, DocumentGraph]] = {}

    def _check(self, qdrant_url: str | None) -> None:
        """Refuse a store of another schema, a URL that contradicts where its vectors are, a lost index."""
        schema = int(self._meta("schema"))
        if schema != SCHEMA_VERSION:
            raise StoreError(f"the store at {self.root} has schema {schema}; this docrefrag reads {SCHEMA_VERSION}. "
                             "Ingest your documents into a new store.")
        stored_url = self._meta("qdrant_url")
        if qdrant_url and stored_url is None and self._has_vectors():
            raise StoreError(f"the store at {self.root} keeps its vectors in the embedded index; "
                             "drop --qdrant-url or ingest into a new store")
        if stored_url and qdrant_url and qdrant_url != stored_url:
            raise StoreError(f"the store at {self.root} keeps its vectors at {stored_url}, not {qdrant_url}")
        if not (stored_url or qdrant_url) and not (self.root / "visual").exists() and self._has_vectors():
            raise StoreError(f"the store's visual index {self.root / 'visual'} is missing "
                             "(deleted or not copied with the "
                             "store): search would lose its dense branch; restore the folder, or ingest the documents "
                             "into a new store")
        # a new store is bound to a server only once the server has answered (`visual`): a dead or mistyped
        # URL must not tie the store to it
        self.qdrant_url = stored_url or qdrant_url

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._visual is not None:
            self._visual.close()
            self._visual = None
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_catalog(self) -> None:
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self.db.executescript(GRAPH_SCHEMA)
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")

    def _has_vectors(self) -> bool:
        """Some page was encoded, so the visual index holds its vectors."""
        return self.db.execute("SELECT 1 FROM tokens LIMIT 1").fetchone() is not None

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    @property
    def visual(self):
        if self._visual is None:
            from docrefrag.indexes.visual import VisualIndex
            from docrefrag.indexes.visual_backends import VisualIndexLockedError

            dim = int(self._meta("text_dim") or 384)
            try:
                self._visual = (VisualIndex(url=self.qdrant_url, api_key=self.qdrant_api_key, dim=dim,
                                            collection=f"docrefrag-{self.store_id}")
                                if self.qdrant_url else VisualIndex(path=self.root / "visual", dim=dim))
            except VisualIndexLockedError as e:
                writer = ingest_in_progress(self.root)
                who = (f"an ingest (PID {writer['pid']}) is writing it" if writer and writer.get("pid")
                       else "an ingest is writing it" if writer else "another docrefrag process has it open")
                raise StoreError(f"the store at {self.root} is busy: {who}; retry when that process has finished. "
                                 "To search while ingesting, keep the vectors on a Qdrant server (--qdrant-url URL "
                                 "on the command line, DocRefrag(qdrant_url=...) in Python)") from e
            if self.qdrant_url and self._meta("qdrant_url") is None:
                with self.db:
                    self.db.execute("INSERT OR IGNORE INTO meta VALUES ('qdrant_url', ?)", (self.qdrant_url,))
                if self._meta("qdrant_url") != self.qdrant_url:  # another process bound it first, elsewhere
                    raise StoreError(f"the store at {self.root} keeps its vectors at {self._meta('qdrant_url')}, "
                                     f"not {self.qdrant_url}")
        return self._visual

    @property
    def store_id(self) -> str:
        value = self._meta("store_id")
        if value is None:
            value = os.urandom(6).hex()
            with self.db:
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (value,))
            value = self._meta("store_id")
        return value

    def check_encoder(self, encoder_id: str, text_dim: int) -> None:
        """Bind the store to one page encoder; refuse tokens from another."""
        stored = self._meta("encoder_id")
        if stored is None:
            with self.db:
                self.db.execute("INSERT INTO meta VALUES ('encoder_id', ?)", (encoder_id,))
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('text_dim', ?)", (str(text_dim),))
        elif stored != encoder_id:
            raise StoreError(f"the store at {self.root} holds tokens of encoder {stored!r}, not {encoder_id!r}; "
                             "use a new --store for this encoder")

    @property
    def encoder_id(self) -> str | None:
        return self._meta("encoder_id")

    @property
    def text_dim(self) -> int:
        """The text embedder's width in the stored tokens (0 before any page was encoded)."""
        return int(self._meta("text_dim") or 0)

    # ------------------------------------------------------------------ reads

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

    def page(self, doc_id: str, page: int) -> PageRecord:
        row = self.db.execute(
            "SELECT width, height, ocr, error, markdown, words, blocks FROM pages WHERE doc_id = ? AND page = ?",
            (doc_id, page),
        ).fetchone()
        if row is None:
            raise StoreError(f"no page {page} of document {doc_id} in the store")
        width, height, ocr, error, markdown, words, blocks = row
        return PageRecord(doc_id, page, width, height, bool(ocr), error, markdown,
                          [Word(*w) for w in json.loads(words)], [Block(*b) for b in json.loads(blocks)])

    def page_markdown(self, doc_id: str, page: int) -> str:
        """The page's markdown alone (no decoding of its words and blocks)."""
        row = self.db.execute("SELECT markdown FROM pages WHERE doc_id = ? AND page = ?", (doc_id, page)).fetchone()
        if row is None:
            raise StoreError(f"no page {page} of document {doc_id} in the store")
        return row[0]

    def page_tokens(self, doc_id: str, page: int) -> PageTokens:
        row = self.db.execute("SELECT tokens, word_counts FROM tokens WHERE doc_id = ? AND page = ?",
                              (doc_id, page)).fetchone()
        if row is None:
            raise StoreError(f"no tokens for page {page} of document {doc_id}; re-ingest the document")
        counts = np.frombuffer(row[1], dtype=np.int32)
        tokens = np.frombuffer(row[0], dtype=np.float16).reshape(len(counts), -1).astype(np.float32)
        return PageTokens(tokens, counts.copy())

    def stacked_tokens(self, pages: list[tuple[str, int]]) -> np.ndarray:
        """(n, m, d) float32 tokens of the pages [(doc_id, page)], in order (what the reader reads)."""
        return np.stack([self.page_tokens(doc_id, page).tokens for doc_id, page in pages])

    def chunk(self, doc_id: str, page: int, chunk: int) -> ChunkRecord:
        row = self.db.execute("SELECT text, x0, y0, x1, y1 FROM chunks WHERE doc_id = ? AND page = ? AND chunk = ?",
                              (doc_id, page, chunk)).fetchone()
        if row is None:
            raise StoreError(f"no chunk {chunk} on page {page} of document {doc_id}")
        return ChunkRecord(doc_id, page, chunk, row[0], tuple(row[1:]))

    def page_chunks(self, doc_id: str, page: int) -> list[ChunkRecord]:
        rows = self.db.execute("SELECT chunk, text, x0, y0, x1, y1 FROM chunks "
                               "WHERE doc_id = ? AND page = ? ORDER BY chunk",
                               (doc_id, page)).fetchall()
        return [ChunkRecord(doc_id, page, r[0], r[1], tuple(r[2:])) for r in rows]

    def page_regions(self, doc_id: str, page: int) -> list[ChunkRecord]:
        """The page's elements of the evidence graph (headings, paragraphs, tables, figures, captions, in
        reading order) as citable regions: `chunk` is the element's index on the page."""
        nodes = self.graph(doc_id).nodes
        return [ChunkRecord(doc_id, page, index, el.text, el.bbox)
                for (p, index), el in sorted(nodes.items()) if p == page and index > 0]

    def text_chunks(self, doc_id: str) -> list[tuple[int, str]]:
        """(page, text) of every BM25 chunk of the document, in page order."""
        return self.db.execute("SELECT page, text FROM chunks WHERE doc_id = ? ORDER BY page, chunk",
                               (doc_id,)).fetchall()

    def page_numbers(self, doc_id: str) -> list[int]:
        return [r[0] for r in self.db.execute("SELECT page FROM pages WHERE doc_id = ? ORDER BY page", (doc_id,))]

    def graph(self, doc_id: str) -> DocumentGraph:
        """The document's evidence graph, read once per store generation (built from the stored pages first
        when the document was ingested before the graph existed)."""
        generation = self._meta("generation")
        cached = self._graphs.get(doc_id)
        if cached is None or cached[0] != generation:
            self._graphs[doc_id] = (generation, DocumentGraph.load(self.db, doc_id, self.text_dim))
        return self._graphs[doc_id][1]

    def render_path(self, doc_id: str, page: int) -> Path:
        return self.root / "renders" / doc_id / f"{page}.jpg"

    def bm25(self) -> BM25Index:
        """The BM25 index of the ready documents. The saved file is used when it reflects the current
        generation; otherwise (an ingest was interrupted before saving it) the index is built in
        memory, and only an ingest writes the file, so concurrent readers never race on it."""
        generation = int(self._meta("generation"))
        if self._bm25 is not None and self._bm25[0] == generation:
            return self._bm25[1]
        index = BM25Index.load(self.root / "bm25.npz", generation) if (self.root / "bm25.npz").is_file() else None
        if index is None:
            index = self._build_bm25()
        self._bm25 = (generation, index)
        return index

    def bm25_saved(self) -> bool:
        """Whether bm25.npz reflects the current documents (else searches build the index in memory)."""
        path = self.root / "bm25.npz"
        return path.is_file() and BM25Index.load(path, int(self._meta("generation"))) is not None

    def rebuild_bm25(self) -> BM25Index:
        """Build the BM25 index of the ready documents and save it (called by ingest)."""
        generation = int(self._meta("generation"))
        index = self._build_bm25()
        index.save(self.root / "bm25.npz", generation)
        return index

    def _build_bm25(self) -> BM25Index:
        rows = self.db.execute(
            """SELECT c.doc_id, c.page, c.chunk, c.text FROM chunks c JOIN documents d ON d.doc_id = c.doc_id
               WHERE d.status = 'ready' ORDER BY c.doc_id, c.page, c.chunk"""
        )
        return BM25Index.build(rows)

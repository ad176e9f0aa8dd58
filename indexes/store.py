"""The store directory: a SQLite catalog, page renders, the BM25 index and the visual index.

    STORE/catalog.sqlite   its tables, each with one owner (indexes/catalog.py lists them):
                           the store's meta rows       `store.meta`     (indexes/catalog.py)
                           documents and their ingest  `store.catalog`  (indexes/catalog.py)
                           pages, tokens, BM25 chunks  `store.pages`    (indexes/page_table.py)
                           the evidence graph          `store.graphs`   (indexes/evidence_graph.py)
                           the experience memory       `store.memory`   (indexes/memory_table.py)
                           the agent's instructions    `store.instructions` (indexes/instructions.py)
                           the branches' health        `store.health`   (indexes/health.py)
    STORE/renders/DOC/N.jpg   144 dpi page renders (`store.pages`)
    STORE/bm25.npz         BM25 term counts of the ready documents, rebuilt when they change (`store.bm25`,
                           indexes/bm25.py)
    STORE/visual/          embedded Qdrant (qdrant-edge) shard, unless a server URL is given (`store.visual`,
                           indexes/visual.py)

``Store`` opens and checks the folder and holds these parts; every query is theirs.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from docrefrag.indexes.bm25 import BM25File
from docrefrag.indexes.catalog import SCHEMA_VERSION, Catalog, Meta
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.evidence_graph import EvidenceGraphs
from docrefrag.indexes.health import HealthTable
from docrefrag.indexes.instructions import AgentInstructions
from docrefrag.indexes.memory_table import MemoryTable
from docrefrag.indexes.page_table import PageTable
from docrefrag.indexes.writer import ingest_in_progress

logger = logging.getLogger(__name__)


class Store:
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
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.meta = Meta(self.db, self.root)
            self.memory = MemoryTable(self.db)
            self.instructions = AgentInstructions(self.db)
            self.graphs = EvidenceGraphs(self.db, self.meta)
            self.health = HealthTable(self.db)
            self.pages = PageTable(self.db, self.root, self.meta, self.graphs, self.health)
            self.catalog = Catalog(self.db, self.root, self.meta, self.pages, self.memory, self.health,
                                   lambda: self.visual)
            self.bm25 = BM25File(self.root / "bm25.npz", self.meta, self.pages)
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

    def _check(self, qdrant_url: str | None) -> None:
        """Refuse a store of another schema, a URL that contradicts where its vectors are, a lost index."""
        schema = int(self.meta.get("schema"))
        if schema != SCHEMA_VERSION:
            raise StoreError(f"the store at {self.root} has schema {schema}; this docrefrag reads {SCHEMA_VERSION}. "
                             "Ingest your documents into a new store.")
        stored_url = self.meta.get("qdrant_url")
        if qdrant_url and stored_url is None and self.pages.has_tokens():
            raise StoreError(f"the store at {self.root} keeps its vectors in the embedded index; "
                             "drop --qdrant-url or ingest into a new store")
        if stored_url and qdrant_url and qdrant_url != stored_url:
            raise StoreError(f"the store at {self.root} keeps its vectors at {stored_url}, not {qdrant_url}")
        if not (stored_url or qdrant_url) and not (self.root / "visual").exists() and self.pages.has_tokens():
            raise StoreError(f"the store's visual index {self.root / 'visual'} is missing "
                             "(deleted or not copied with the "
                             "store): search would lose its dense branch; restore the folder, or ingest the documents "
                             "into a new store")
        # a new store is bound to a server only once the server has answered (`visual`): a dead or mistyped
        # URL must not tie the store to it
        self.qdrant_url = stored_url or qdrant_url

    def close(self) -> None:
        if self._visual is not None:
            self._visual.close()
            self._visual = None
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def visual(self):
        """The visual index (Qdrant), opened on first use."""
        if self._visual is None:
            from docrefrag.indexes.visual import VisualIndex
            from docrefrag.indexes.visual_backends import VisualIndexLockedError

            dim = int(self.meta.get("text_dim") or 384)
            try:
                self._visual = (VisualIndex(url=self.qdrant_url, api_key=self.qdrant_api_key, dim=dim,
                                            collection=f"docrefrag-{self.meta.store_id}")
                                if self.qdrant_url else VisualIndex(path=self.root / "visual", dim=dim))
            except VisualIndexLockedError as e:
                writer = ingest_in_progress(self.root)
                who = (f"an ingest (PID {writer['pid']}) is writing it" if writer and writer.get("pid")
                       else "an ingest is writing it" if writer else "another docrefrag process has it open")
                raise StoreError(f"the store at {self.root} is busy: {who}; retry when that process has finished. "
                                 "To search while ingesting, keep the vectors on a Qdrant server (--qdrant-url URL "
                                 "on the command line, DocRefrag(qdrant_url=...) in Python)") from e
            if self.qdrant_url and self.meta.get("qdrant_url") is None:
                bound = self.meta.bind("qdrant_url", self.qdrant_url)
                if bound != self.qdrant_url:  # another process bound it first, elsewhere
                    raise StoreError(f"the store at {self.root} keeps its vectors at {bound}, not {self.qdrant_url}")
        return self._visual

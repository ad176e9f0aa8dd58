"""The experience memory's storage: the `plans` table of the store's catalog, and every query of it.

One row per validated answer: its question and the question's query embedding (float32, unit length),
the documents it was asked over, the plan's sub-queries, the evidence it cited, the graph nodes it ran,
its rounds and its validator confidence. What is remembered and when, and how a recalled plan seeds a
new question's search, is the ask graph's (graph/memory.py); this part stores, finds the nearest rows
to a query embedding, and drops the rows whose documents are all retired (called by the catalog's
retirement of old versions, indexes/catalog.py, inside its transaction). The Store exposes it as
`store.memory`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass

import numpy as np

from docrefrag.indexes.errors import StoreError

SCHEMA = """
CREATE TABLE IF NOT EXISTS plans (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created_at REAL NOT NULL, question TEXT NOT NULL, embedding BLOB NOT NULL,
    doc_ids TEXT NOT NULL, sub_queries TEXT NOT NULL, evidence TEXT NOT NULL, nodes TEXT NOT NULL,
    rounds INTEGER NOT NULL, confidence REAL NOT NULL
);
"""
_COLUMNS = "id, created_at, question, doc_ids, sub_queries, evidence, nodes, rounds, confidence"


@dataclass(frozen=True)
class StoredPlan:
    id: int
    created_at: float  # time.time() when it was stored
    question: str
    doc_ids: list[str]  # the documents it was asked over
    sub_queries: list[str]
    evidence: dict  # "pages": [{doc_id, page}] cited; "sections": [{doc_id, id "PAGE:ELEMENT", text}] above them
    nodes: list[str]  # the graph nodes the run ran, in first-run order
    rounds: int
    confidence: float  # the validator's


def _plan(row: tuple) -> StoredPlan:
    id_, created, question, doc_ids, sub_queries, evidence, nodes, rounds, confidence = row
    return StoredPlan(id_, created, question, json.loads(doc_ids), json.loads(sub_queries), json.loads(evidence),
                      json.loads(nodes), rounds, confidence)


class MemoryTable:
    """The `plans` rows of a store's catalog database."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.db.executescript(SCHEMA)

    def plans(self) -> list[StoredPlan]:
        """Every stored plan, oldest first."""
        return [_plan(r) for r in self.db.execute(f"SELECT {_COLUMNS} FROM plans ORDER BY id")]

    def add(self, question: str, embedding: np.ndarray, doc_ids: list[str], sub_queries: list[str], evidence: dict,
            nodes: list[str], rounds: int, confidence: float) -> int:
        """Store one plan; its id. A StoreError when the catalog cannot be written now (busy, read-only)."""
        row = (time.time(), question, np.asarray(embedding, dtype=np.float32).tobytes(), json.dumps(doc_ids),
               json.dumps(sub_queries), json.dumps(evidence), json.dumps(nodes), rounds, confidence)
        try:
            with self.db:
                return self.db.execute("INSERT INTO plans (created_at, question, embedding, doc_ids, sub_queries, "
                                       "evidence, nodes, rounds, confidence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                       row).lastrowid
        except sqlite3.OperationalError as e:
            raise StoreError(str(e)) from e

    def nearest(self, query: np.ndarray, min_similarity: float, k: int,
                doc_ids: list[str] | None) -> list[tuple[StoredPlan, float]]:
        """(plan, cosine) of the `k` plans nearest the unit-length `query` at `min_similarity` or above, nearest
        first (the newer of equals first), of those asked over a document of `doc_ids` (None: every plan)."""
        scope = None if doc_ids is None else set(doc_ids)
        found = []
        for embedding, *row in self.db.execute(f"SELECT embedding, {_COLUMNS} FROM plans"):
            plan = _plan(tuple(row))
            similarity = float(query @ np.frombuffer(embedding, dtype=np.float32))
            if similarity >= min_similarity and (scope is None or scope & set(plan.doc_ids)):
                found.append((plan, similarity))
        return sorted(found, key=lambda f: (-f[1], -f[0].id))[:k]

    def clear(self) -> int:
        """Remove every plan; how many were removed."""
        with self.db:
            return self.db.execute("DELETE FROM plans").rowcount

    def drop_orphans(self) -> None:
        """Remove the plans asked over no document the catalog still holds (in the caller's transaction)."""
        self.db.execute("DELETE FROM plans WHERE NOT EXISTS (SELECT 1 FROM json_each(plans.doc_ids) j "
                        "JOIN documents d ON d.doc_id = j.value)")

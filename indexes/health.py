"""Branch health: can each retrieval branch find a page of a document from that page's own words?

Per-query signals (indexes/fusion.py) cannot always tell a branch that fails on a corpus from one that
works; queries whose answer page is known can. Per document, QUERIES pseudo-queries are drawn
(deterministically from the doc id), each a window of WORDS consecutive words of a text chunk. Each
branch ranks all pages of the document for each; its health is the chance-corrected mean reciprocal
rank of the source page,

    h_b = (MRR_b - c) / (1 - c),   c = H_n / n  (the MRR of a random order of the n pages),

1 when the branch always ranks the source page first, about 0 when it finds it by chance. The fusion
switches a branch off for a document's pages when its health is below `FusionConfig.health_ratio`
(0.5) times the other's. Documents of at most MIN_PAGES pages, or with pseudo-queries from fewer than
MIN_SOURCES pages, get NaN: no gating. Why only a large gap acts, and why QUERIES = 64:
docs/decisions/branch-health.md.

This module measures it (`measure`, from the searcher's own branch scores) and keeps it, once per
document, in the store's `branch_health` table through `HealthTable`, the Store's part `store.health`,
which makes every write of the table: a measure recorded, and a document's record dropped (inside their
transactions) when indexes/page_table.py writes a page of it or indexes/catalog.py finishes or retires it.
`of_documents` reads a document's record or measures it now. VERSION names this recipe: bump it when the
recipe or a branch's scoring changes, so the records are measured again.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from docrefrag.indexes.hybrid import HybridSearcher

logger = logging.getLogger(__name__)

QUERIES = 64  # pseudo-queries per document
WORDS = 12  # words per pseudo-query
MIN_PAGES = 5  # the fusion's top 5 holds every page of a document this short: nothing to judge
MIN_SOURCES = 3  # pseudo-queries from fewer distinct pages than this are too little evidence to judge by
VERSION = 3  # the recipe above; records of another version are recomputed
_WORD = re.compile(r"\w[\w.,%$-]*")
Run = tuple[int, np.ndarray, np.ndarray]  # a pseudo-query's source page, BM25 and visual scores of the pages
SCHEMA = """
CREATE TABLE IF NOT EXISTS branch_health (
    doc_id TEXT PRIMARY KEY, version INTEGER NOT NULL, sparse REAL, dense REAL, queries INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class BranchHealth:
    """Chance-corrected MRR of each branch on one document's pseudo-queries (NaN: not measured)."""

    sparse: float
    dense: float
    queries: int

    @classmethod
    def unmeasured(cls) -> BranchHealth:
        return cls(float("nan"), float("nan"), 0)


def pseudo_queries(doc_id: str, chunks: Iterable[tuple[int, str]], n: int = QUERIES,
                   words: int = WORDS) -> list[tuple[int, str]]:
    """n (page, query) pairs: each a window of `words` words of a chunk with at least that many (every
    such chunk once before any twice, at another window if it has more words), drawn by a generator
    seeded from the doc id: the same document always gets the same queries. [] when no chunk has enough
    words."""
    pool = [(page, found) for page, text in chunks if len(found := _WORD.findall(text)) >= words]
    if not pool:
        return []
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "little"))
    out = []
    for i in np.concatenate([rng.permutation(len(pool)) for _ in range(-(-n // len(pool)))])[:n]:
        page, found = pool[i]
        start = int(rng.integers(0, len(found) - words + 1))
        out.append((page, " ".join(found[start:start + words])))
    return out


def health_of(pages: Sequence[int], runs: Sequence[Run]) -> BranchHealth:
    """The health of both branches on a document of `pages` from its pseudo-query runs: (source page,
    sparse scores, dense scores), the scores aligned with `pages` (NaN: the branch did not score the page)."""
    pages = np.asarray(pages)
    n = len(pages)
    if n <= MIN_PAGES or len({source for source, *_ in runs}) < MIN_SOURCES:
        return BranchHealth.unmeasured()
    chance = float(np.sum(1.0 / np.arange(1, n + 1))) / n
    rr: list[list[float]] = [[], []]
    for source, *scores in runs:
        for b, x in enumerate(scores):
            x = np.where(np.isfinite(x), x, -np.inf)
            own = x[pages == source][0]
            rank = 1.0 + np.sum(x > own) + (np.sum(x == own) - 1) / 2.0  # a tie counts half
            rr[b].append(1.0 / rank)
    sparse, dense = ((float(np.mean(r)) - chance) / (1.0 - chance) for r in rr)
    return BranchHealth(sparse, dense, len(rr[0]))


def pseudo_query_runs(searcher: HybridSearcher, doc_id: str) -> tuple[list[int], list[Run]]:
    """The document's pages and, per pseudo-query, (source page, BM25 scores, visual scores) of every page,
    scored by the searcher's branches as a search scores them."""
    store = searcher.store
    pages = store.pages.numbers(doc_id)
    queries = pseudo_queries(doc_id, store.pages.text_chunks(doc_id)) if len(pages) > MIN_PAGES else []  # else unjudged
    vectors = searcher.embedder.embed_queries([q for _, q in queries]) if queries else []
    runs = []
    for (source, query), vec in zip(queries, vectors, strict=True):
        keys, sparse, dense, _ = searcher.branch_scores(query, vec, [doc_id], len(pages))
        where = {page: i for i, (_, page) in enumerate(keys)}
        runs.append((source, *(np.array([x[where[p]] if p in where else np.nan for p in pages])
                               for x in (sparse, dense))))
    return pages, runs


def measure(searcher: HybridSearcher, doc_id: str) -> BranchHealth:
    return health_of(*pseudo_query_runs(searcher, doc_id))


class HealthTable:
    """The `branch_health` rows of a store's catalog database: each document's health, of the recipe VERSION."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.db.executescript(SCHEMA)

    def recorded(self, doc_ids: Sequence[str]) -> dict[str, BranchHealth]:
        """The recorded branch health of those of `doc_ids` measured with the current recipe."""
        rows = self.db.execute(f"SELECT doc_id, sparse, dense, queries FROM branch_health WHERE version = ? AND "
                               f"doc_id IN ({', '.join('?' * len(doc_ids))})", (VERSION, *doc_ids)).fetchall()
        return {d: BranchHealth(_nan(s), _nan(x), q) for d, s, x, q in rows}

    def record(self, doc_id: str, health: BranchHealth) -> None:
        """Keep the measured health of a ready document (a document retired meanwhile keeps nothing)."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO branch_health SELECT ?, ?, ?, ?, ? WHERE EXISTS "
                            "(SELECT 1 FROM documents WHERE doc_id = ? AND status = 'ready')",
                            (doc_id, VERSION, health.sparse, health.dense, health.queries, doc_id))

    def drop(self, doc_id: str) -> None:
        """Forget the document's record, measured on pages that are changing or gone (in the caller's
        transaction)."""
        self.db.execute("DELETE FROM branch_health WHERE doc_id = ?", (doc_id,))


def of_documents(searcher: HybridSearcher, doc_ids: Sequence[str]) -> dict[str, BranchHealth]:
    """Each document's branch health, from the store's record or measured now (and recorded)."""
    known = searcher.store.health.recorded(doc_ids)
    missing = [d for d in doc_ids if d not in known]
    if missing:
        logger.info("measuring the retrieval branches' health on %d document(s) (once per document)", len(missing))
    for doc_id in missing:
        known[doc_id] = measure(searcher, doc_id)
        try:
            searcher.store.health.record(doc_id, known[doc_id])
        except sqlite3.OperationalError as e:  # a cache: the search goes on, the next one measures again
            logger.warning("could not record the branch health of %s in the store (%s)", doc_id, e)
    return known


def _nan(x: float | None) -> float:
    return float("nan") if x is None else float(x)

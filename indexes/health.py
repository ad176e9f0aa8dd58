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

The health is computed once per document and kept in the store's catalog (`Store.branch_health`);
VERSION names this recipe: bump it when the recipe or a branch's scoring changes, so the records are
measured again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

QUERIES = 64  # pseudo-queries per document
WORDS = 12  # words per pseudo-query
MIN_PAGES = 5  # the fusion's top 5 holds every page of a document this short: nothing to judge
MIN_SOURCES = 3  # pseudo-queries from fewer distinct pages than this are too little evidence to judge by
VERSION = 3  # the recipe above; records of another version are recomputed
_WORD = re.compile(r"\w[\w.,%$-]*")


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


def health_of(pages: Sequence[int], runs: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> BranchHealth:
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

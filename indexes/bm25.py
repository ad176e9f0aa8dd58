"""BM25 over page text, with chunk-level scores for the best snippet and box of each hit.

Scores are exactly those of rank-bm25's `BM25Okapi` (k1=1.5, b=0.75, epsilon=0.25; idf floored at
epsilon * mean idf) computed over the searched scope: a page is one BM25 document (its chunks'
term counts summed), and the statistics (N, df, avgdl) come from the pages in scope, so searching
one document equals a rank-bm25 index built over that document's pages (a parity test checks it).
The index is a sparse term-count matrix over chunks (scipy CSR) plus its vocabulary, persisted as
one .npz file, so reopening costs a file read and no tokenisation. `BM25File` is the Store's part
`store.bm25`: the index of the store's ready documents, saved as STORE/bm25.npz.
"""

from __future__ import annotations

import json
import os
import re
import uuid
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from docrefrag.indexes.catalog import Meta
    from docrefrag.indexes.page_table import PageTable

_TOKEN = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    "a an and are as at be but by for from has have how in is it its of on or that the this to was were what "
    "when where which who whom why will with do does did according".split()
)


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without English stopwords (used for pages and queries alike)."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


@dataclass(frozen=True)
class ChunkRow:
    doc_id: str
    page: int
    chunk: int


@dataclass(frozen=True)
class ScopeScores:
    scope: np.ndarray  # (n,) page positions searched
    scores: np.ndarray  # (n,) their BM25 scores
    query: Counter  # query term counts
    idf: np.ndarray | None  # (vocab,) idf over the scope (None: empty scope)
    avgdl: float


@dataclass(frozen=True)
class BM25Hit:
    doc_id: str
    page: int
    score: float
    chunk: int  # best-matching chunk of the page (index within the page)


class BM25Index:
    def __init__(self, rows: list[ChunkRow], counts: sp.csr_matrix, vocab: list[str],
                 k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        if counts.shape != (len(rows), len(vocab)):
            raise ValueError(f"counts has shape {counts.shape}, expected ({len(rows)}, {len(vocab)})")
        self.rows, self.counts, self.vocab = rows, counts.tocsr(), vocab
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self.term_index = {t: i for i, t in enumerate(vocab)}
        pages = [(r.doc_id, r.page) for r in rows]
        self.page_keys = list(dict.fromkeys(pages))  # unique (doc_id, page) in row order
        self.position = key_index = {key: i for i, key in enumerate(self.page_keys)}  # (doc_id, page) -> position
        self.row_page = np.array([key_index[p] for p in pages], dtype=np.int64)  # (n_rows,)
        self.page_doc = np.array([k[0] for k in self.page_keys], dtype=object)  # (n_pages,)
        member = sp.csr_matrix(
            (np.ones(len(rows)), (self.row_page, np.arange(len(rows)))), shape=(len(self.page_keys), len(rows))
        )
        self.page_counts = (member @ self.counts).tocsr()  # (n_pages, vocab)
        self.page_len = np.asarray(self.page_counts.sum(axis=1)).ravel()  # (n_pages,)

    @classmethod
    def build(cls, chunks: Iterable[tuple[str, int, int, str]]) -> BM25Index:
        """From (doc_id, page, chunk index, text) tuples."""
        rows, data, indices, indptr = [], [], [], [0]
        vocab: dict[str, int] = {}
        for doc_id, page, chunk, text in chunks:
            tf = Counter(tokenize(text))
            for term, n in tf.items():
                indices.append(vocab.setdefault(term, len(vocab)))
                data.append(n)
            indptr.append(len(indices))
            rows.append(ChunkRow(doc_id, page, chunk))
        counts = sp.csr_matrix(
            (np.array(data, dtype=np.float32), np.array(indices, dtype=np.int64), np.array(indptr, dtype=np.int64)),
            shape=(len(rows), len(vocab)),
        )
        return cls(rows, counts, list(vocab))

    def save(self, path: Path, generation: int) -> None:
        """Atomically write the index to `path` (.npz), tagged with the store generation it reflects."""
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp.npz")
        meta = {"vocab": self.vocab, "rows": [[r.doc_id, r.page, r.chunk] for r in self.rows], "generation": generation}
        np.savez(tmp, data=self.counts.data, indices=self.counts.indices, indptr=self.counts.indptr,
                 shape=np.array(self.counts.shape), meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, generation: int) -> BM25Index | None:
        """The index saved at `path` if it reflects store generation `generation`, else None."""
        try:
            with np.load(path) as z:
                meta = json.loads(z["meta"].tobytes())
                if meta.get("generation") != generation:
                    return None
                counts = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            return None  # missing or damaged: the caller rebuilds it from the catalog
        return cls([ChunkRow(*r) for r in meta["rows"]], counts, meta["vocab"])

    def __len__(self) -> int:
        return len(self.page_keys)

    def _idf(self, scope: np.ndarray) -> tuple[np.ndarray, float]:
        """idf of every term with a df > 0 in scope (rank-bm25's epsilon floor), and avgdl."""
        sub = self.page_counts[scope]
        df = np.bincount(sub.indices, minlength=len(self.vocab))  # (vocab,) pages containing each term
        present = df > 0
        n = len(scope)
        idf = np.zeros(len(self.vocab))
        idf[present] = np.log(n - df[present] + 0.5) - np.log(df[present] + 0.5)
        floor = self.epsilon * idf[present].mean() if present.any() else 0.0
        idf[present & (idf < 0)] = floor
        return idf, float(self.page_len[scope].mean()) if n else 1.0

    def _score(self, counts: sp.csr_matrix, lengths: np.ndarray, query: Counter, idf: np.ndarray,
               avgdl: float) -> np.ndarray:
        scores = np.zeros(counts.shape[0])
        norm = self.k1 * (1 - self.b + self.b * lengths / avgdl)  # (n,)
        for term, times in query.items():
            col = self.term_index.get(term)
            if col is None:
                continue
            tf = counts[:, col].toarray().ravel()  # (n,)
            scores += times * idf[col] * tf * (self.k1 + 1) / (tf + norm)
        return scores

    def scope(self, doc_ids: Sequence[str] | None) -> np.ndarray:
        if doc_ids is None:
            return np.arange(len(self.page_keys))
        return np.flatnonzero(np.isin(self.page_doc, list(doc_ids)))

    def page_scores(self, query: str, doc_ids: Sequence[str] | None = None) -> ScopeScores:
        """BM25 score of every page in scope, with the statistics used (for `best_chunks`)."""
        scope = self.scope(doc_ids)
        q = Counter(tokenize(query))
        if len(scope) == 0:
            return ScopeScores(scope, np.zeros(0), q, None, 1.0)
        idf, avgdl = self._idf(scope)
        return ScopeScores(scope, self._score(self.page_counts[scope], self.page_len[scope], q, idf, avgdl),
                           q, idf, avgdl)

    def best_chunks(self, scored: ScopeScores, positions: np.ndarray) -> dict[int, int]:
        """Best-matching chunk index of each page position, with the statistics of `scored`."""
        rows = np.flatnonzero(np.isin(self.row_page, positions))
        if scored.idf is None or len(rows) == 0:
            return {}
        row_counts = self.counts[rows]
        row_scores = self._score(row_counts, np.asarray(row_counts.sum(axis=1)).ravel(), scored.query, scored.idf,
                                 scored.avgdl)
        best: dict[int, tuple[float, int]] = {}
        for r, score in zip(rows, row_scores, strict=True):
            p = int(self.row_page[r])
            if p not in best or score > best[p][0]:
                best[p] = (float(score), self.rows[r].chunk)
        return {p: chunk for p, (_, chunk) in best.items()}

    def search(self, query: str, k: int = 10, doc_ids: Sequence[str] | None = None) -> list[BM25Hit]:
        """Top-k pages in scope, each with its best chunk."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        scored = self.page_scores(query, doc_ids)
        order = np.argsort(-scored.scores, kind="stable")[:k]
        best = self.best_chunks(scored, scored.scope[order])
        return [BM25Hit(self.page_keys[p][0], self.page_keys[p][1], float(s), best.get(int(p), 0))
                for p, s in zip(scored.scope[order], scored.scores[order], strict=True)]


class BM25File:
    """The BM25 index of a store's ready documents, saved at `path` for one store generation. The saved file is
    used when it reflects the current generation; otherwise (an ingest was interrupted before saving it) the
    index is built in memory, and only an ingest writes the file, so concurrent readers never race on it."""

    def __init__(self, path: Path, meta: Meta, pages: PageTable) -> None:
        self.path, self.meta, self.pages = path, meta, pages
        self._index: tuple[int, BM25Index] | None = None

    def index(self) -> BM25Index:
        generation = self.meta.generation
        if self._index is not None and self._index[0] == generation:
            return self._index[1]
        index = BM25Index.load(self.path, generation) if self.path.is_file() else None
        if index is None:
            index = BM25Index.build(self.pages.ready_chunks())
        self._index = (generation, index)
        return index

    def saved(self) -> bool:
        """Whether the file reflects the current documents (else searches build the index in memory)."""
        return self.path.is_file() and BM25Index.load(self.path, self.meta.generation) is not None

    def rebuild(self) -> BM25Index:
        """Build the index and save it (called by ingest)."""
        generation = self.meta.generation
        index = BM25Index.build(self.pages.ready_chunks())
        index.save(self.path, generation)
        return index

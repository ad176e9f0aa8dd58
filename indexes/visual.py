"""Visual index: page-region embeddings in Qdrant, embedded by default, remote by URL.

``VisualIndex`` validates pages and scores them; the engines behind it, and the points they hold
(a ``pooled`` vector and the page's ``chunks`` vectors), are in indexes/visual_backends.py.

A page scores ``max_i cos(query, chunk_i) + POOLED_WEIGHT * cos(query, pooled)``: its best region,
plus how well the page as a whole matches (measured in docs/decisions/dense-score.md: MaxSim alone
ranks pages by one region and lets a stray phrase win; with the pooled term, dense Recall@5 rose
from 0.648 to 0.679 on MMLongBench-Doc and from 0.655 to 0.740 on LongDocURL, and weights 0.25-1.0
all gained on both). The two scores come from two queries, one per vector; the union of their top
lists is completed by id and re-sorted, widened (Fagin's threshold algorithm) until no page outside
it can score above the k-th, so the result is exact.
Blank pages (no non-zero chunk row) are not stored.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from docrefrag.core.config import CHUNK_K, GRID
from docrefrag.indexes.visual_backends import (
    CHUNKS,
    POOLED,
    Backend,
    EdgeBackend,
    PagePoint,
    ServerBackend,
    VisualHit,
)

logger = logging.getLogger(__name__)

MAX_CHUNKS_PER_PAGE = GRID * GRID // CHUNK_K  # retrieval chunks of one page
POOLED_WEIGHT = 0.5  # weight of the page's pooled cosine next to its best chunk's (module docstring)
MIN_WIDTH = 64  # pages each vector's query returns at first (widened x4 until the top k is exact)


def page_point_id(doc_id: str, page: int) -> str:
    """The deterministic point id of a page: uuid5 of "doc_id/page"."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc_id}/{page}"))


def _page_score(best: float, pooled: float) -> float:
    """The page score (module docstring) from the best chunk's cosine and the pooled vector's."""
    return best + POOLED_WEIGHT * pooled


def _by_id(hits: list[VisualHit]) -> dict[str, VisualHit]:
    return {page_point_id(h.doc_id, h.page): h for h in hits}


class VisualIndex:
    """Page-region embeddings of every page, searched by the page score; embedded (path) or remote (url).

    >>> with VisualIndex(path=store / "visual") as index:          # doctest: +SKIP
    ...     index.upsert_page(doc_id, 1, pooled, chunks)           # (384,), (n, 384)
    ...     index.search(query, k=5, doc_ids=[doc_id])             # [VisualHit(doc_id, 1, 0.83), ...]
    """

    def __init__(
        self,
        path: Path | None = None,
        url: str | None = None,
        api_key: str | None = None,
        dim: int = 384,
        collection: str = "pages",
    ) -> None:
        if path is not None and url is not None:
            raise ValueError(
                f"pass either path= (embedded index folder) or url= (Qdrant server), not both; got "
                f"path={str(path)!r} and url={url!r}"
            )
        if path is None and url is None:
            raise ValueError("pass path= (embedded index folder) or url= (Qdrant server); got neither")
        if api_key is not None and url is None:
            raise ValueError("api_key= is only used with url= (a Qdrant server); the embedded index has no key")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if not collection:
            raise ValueError("collection must be a non-empty name")
        self.dim = dim
        self.location = str(path) if path is not None else url
        self._backend: Backend | None = (
            EdgeBackend(Path(path), collection, dim)
            if path is not None
            else ServerBackend(url, api_key, collection, dim)
        )

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush and release the index (the folder lock, or the server connection). Idempotent."""
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def __enter__(self) -> VisualIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _open(self) -> Backend:
        if self._backend is None:
            raise RuntimeError(f"the visual index at {self.location} is closed; open a new VisualIndex")
        return self._backend

    # ------------------------------------------------------------------ writes

    def upsert_page(self, doc_id: str, page: int, pooled: np.ndarray, chunks: np.ndarray) -> None:
        """Store (or replace) one page; a page with no non-zero chunk row is removed instead."""
        self.upsert_pages([(doc_id, page, pooled, chunks)])

    def upsert_pages(
        self,
        items: Iterable[tuple[str, int, np.ndarray, np.ndarray]],
        batch_size: int = 64,
        show_progress: bool = False,
    ) -> int:
        """Store (or replace) pages ``(doc_id, page, pooled (dim,), chunks (n, dim))`` in batches.

        Zero-norm chunk rows are dropped; a page left without rows (blank) is not stored, and a
        previous version of it is removed. Each batch is validated before it is written, so an
        invalid item stops the call after the batches before it. Returns the pages stored.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        backend = self._open
        stored = 0
        batch: list[PagePoint] = []
        blank: list[str] = []

        def write() -> None:
            if batch:
                backend.upsert(batch)
            if blank:
                backend.delete_ids(blank)
                logger.debug("%d blank pages not stored", len(blank))
            batch.clear()
            blank.clear()

        progress = None
        if show_progress:
            from tqdm import tqdm

            items = progress = tqdm(items, desc="visual index", unit="page")
        for item in items:
            point = self._validate_page(*item)
            if point.chunks.shape[0] == 0:
                blank.append(point.id)
            else:
                batch.append(point)
                stored += 1
            if len(batch) + len(blank) >= batch_size:
                write()
        write()
        if progress is not None:
            progress.close()
        return stored

    def delete_doc(self, doc_id: str) -> None:
        """Remove every page of ``doc_id`` (nothing happens if it has none)."""
        self._check_doc_id(doc_id)
        self._open.delete_doc(doc_id)

    # ------------------------------------------------------------------ reads

    def search(
        self,
        query: np.ndarray,
        k: int = 10,
        doc_ids: Sequence[str] | None = None,
        first_stage: int | None = None,
    ) -> list[VisualHit]:
        """Top-``k`` pages by the page score (module docstring) of ``query`` (dim,), best first.

        ``doc_ids`` restricts the search to those documents. ``first_stage=n`` first keeps the
        ``n`` pages nearest by the pooled vector, then scores only them (faster on a large store,
        approximate); without it the result is the exact top ``k`` of every (filtered) page.
        """
        q, doc_ids = self._checked_query(query, k, doc_ids)
        if first_stage is not None and (
            isinstance(first_stage, bool) or not isinstance(first_stage, int) or first_stage < k
        ):
            raise ValueError(f"first_stage must be an int >= k={k} (pages kept before the exact scoring), "
                             f"got {first_stage!r}")
        if doc_ids == []:
            return []
        if first_stage is not None:
            pooled = self._open.nearest(q, POOLED, first_stage, doc_ids, None)
            return self._complete(q, doc_ids, {}, _by_id(pooled))[:k]
        width = max(MIN_WIDTH, 4 * k)
        while True:
            best = self._open.nearest(q, CHUNKS, width, doc_ids, None)
            pooled = self._open.nearest(q, POOLED, width, doc_ids, None)
            hits = self._complete(q, doc_ids, _by_id(best), _by_id(pooled))
            if len(best) < width or not best:  # every (filtered) page was returned: nothing is outside
                return hits[:k]
            bound = _page_score(best[-1].score, pooled[-1].score)  # the most any page outside can score
            if len(hits) >= k and hits[k - 1].score >= bound:
                return hits[:k]
            width *= 4

    def vector_search(self, query: np.ndarray, using: str, k: int = 10,
                      doc_ids: Sequence[str] | None = None) -> list[VisualHit]:
        """Top-``k`` pages by one of the two vectors alone (``using``: "chunks", the best chunk's cosine;
        "pooled", the pooled vector's), exact, best first: the page score's two terms, for measuring it."""
        if using not in (CHUNKS, POOLED):
            raise ValueError(f"using must be {CHUNKS!r} or {POOLED!r}, got {using!r}")
        q, doc_ids = self._checked_query(query, k, doc_ids)
        return [] if doc_ids == [] else self._open.nearest(q, using, k, doc_ids, None)

    def _checked_query(self, query: np.ndarray, k: int,
                       doc_ids: Sequence[str] | None) -> tuple[np.ndarray, list[str] | None]:
        """The query as a (dim,) float32 vector and doc_ids as a list (or None), or a clear error."""
        q = self._as_matrix("query", query, ndim=1)  # (dim,)
        if not np.all(np.isfinite(q)) or not np.any(q):
            raise ValueError("query must be finite and non-zero")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        if isinstance(doc_ids, str):
            raise ValueError(f"doc_ids must be a sequence of doc ids, got the string {doc_ids!r}; pass [{doc_ids!r}]")
        if doc_ids is not None:
            doc_ids = list(doc_ids)
            for doc_id in doc_ids:
                self._check_doc_id(doc_id)
        return q, doc_ids

    def _complete(self, q: np.ndarray, doc_ids: list[str] | None, best: dict[str, VisualHit],
                  pooled: dict[str, VisualHit]) -> list[VisualHit]:
        """The pages of either list with both scores (those missing one fetched by id), by page score."""
        for have, other, using in ((best, pooled, CHUNKS), (pooled, best, POOLED)):
            missing = [i for i in other if i not in have]
            if missing:
                have.update(_by_id(self._open.nearest(q, using, len(missing), doc_ids, missing)))
        hits = [VisualHit(h.doc_id, h.page, _page_score(h.score, pooled[i].score))
                for i, h in best.items() if i in pooled]
        return sorted(hits, key=lambda h: (-h.score, h.doc_id, h.page))

    def doc_pages(self, doc_id: str) -> set[int]:
        """The 1-based pages of ``doc_id`` present in the index."""
        self._check_doc_id(doc_id)
        return self._open.doc_pages(doc_id)

    def count(self) -> int:
        """Pages in the index."""
        return self._open.count()

    # ------------------------------------------------------------------ validation

    @staticmethod
    def _check_doc_id(doc_id: str) -> None:
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"doc_id must be a non-empty str, got {doc_id!r}")

    def _as_matrix(self, name: str, array: np.ndarray, ndim: int) -> np.ndarray:
        """Check type, rank, width and dtype; return a float32 copy."""
        expected = f"({self.dim},)" if ndim == 1 else f"(n, {self.dim})"
        if not isinstance(array, np.ndarray):
            raise ValueError(f"{name} must be a numpy array of shape {expected}, got {type(array).__name__}")
        if array.ndim != ndim or array.shape[-1] != self.dim:
            raise ValueError(f"{name} must have shape {expected}, got {array.shape}")
        if not np.issubdtype(array.dtype, np.floating):
            raise ValueError(f"{name} must be a float array (float16/32/64), got dtype {array.dtype}")
        return array.astype(np.float32)

    def _validate_page(self, doc_id: str, page: int, pooled: np.ndarray, chunks: np.ndarray) -> PagePoint:
        self._check_doc_id(doc_id)
        if isinstance(page, bool) or not isinstance(page, (int, np.integer)) or page < 1:
            raise ValueError(f"page must be a 1-based int, got {page!r} (doc {doc_id})")
        where = f"doc {doc_id} page {page}"
        pooled = self._as_matrix("pooled", pooled, ndim=1)  # (dim,)
        chunks = self._as_matrix("chunks", chunks, ndim=2)  # (n, dim)
        if not (np.all(np.isfinite(pooled)) and np.all(np.isfinite(chunks))):
            raise ValueError(f"pooled and chunks must be finite (no NaN/inf), {where}")
        chunks = chunks[np.any(chunks != 0, axis=1)]  # (n', dim): zero-norm rows dropped
        if chunks.shape[0] > MAX_CHUNKS_PER_PAGE:
            raise ValueError(
                f"chunks has {chunks.shape[0]} non-zero rows, more than {MAX_CHUNKS_PER_PAGE} per page, {where}"
            )
        if chunks.shape[0] > 0 and not np.any(pooled):
            raise ValueError(f"pooled is all zeros while the page has {chunks.shape[0]} chunk vectors, {where}")
        return PagePoint(page_point_id(doc_id, int(page)), doc_id, int(page), pooled, chunks)

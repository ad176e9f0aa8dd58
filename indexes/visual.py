"""Visual index: page-region embeddings in Qdrant, embedded by default, remote by URL.

One point per page, id ``uuid5(doc_id/page)``, payload ``{"doc_id", "page"}`` (1-based), and
two named vectors:

- ``pooled``: the page's word-weighted mean vector (cosine);
- ``chunks``: the page's chunk vectors (1-108 rows, cosine, MaxSim comparator, no HNSW graph:
  they are always scored exactly, over all pages or over the pages a first stage kept).

A page scores ``max_i cos(query, chunk_i) + POOLED_WEIGHT * cos(query, pooled)``: its best region,
plus how well the page as a whole matches (measured in docs/decisions/dense-score.md: MaxSim alone
ranks pages by one region and lets a stray phrase win; with the pooled term, dense Recall@5 rose
from 0.648 to 0.679 on MMLongBench-Doc and from 0.655 to 0.740 on LongDocURL, and weights 0.25-1.0
all gained on both). The two scores come from two queries, one per vector; the union of their top
lists is completed by id and re-sorted, widened (Fagin's threshold algorithm) until no page outside
it can score above the k-th, so the result is exact.
Blank pages (no non-zero chunk row) are not stored.

Backends, behind one facade (``VisualIndex``):

- embedded (``path=``): qdrant-edge's ``EdgeShard``, the in-process Rust engine, one shard per
  collection under the folder. Chosen over qdrant-client's local mode by
  ``evals/bench_qdrant.py`` (2,500 pages, 150k vectors, 2 cores): a fresh process answers its
  first query in 0.3-0.4 s instead of 13.5 s, with 30 MB of private memory instead of 2.7 GB
  (the vectors are mmapped files, shared and reclaimable), and exact MaxSim takes about 1 ms
  within one document (283 pages) and 12 ms over the whole store, instead of 130-160 ms.
- server (``url=``): a Qdrant server or cluster through qdrant-client's REST API.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

logger = logging.getLogger(__name__)

POOLED = "pooled"
CHUNKS = "chunks"
MAX_CHUNKS_PER_PAGE = 108  # 18x18 grid cells in chunks of k=3
POOLED_WEIGHT = 0.5  # weight of the page's pooled cosine next to its best chunk's (module docstring)
MIN_WIDTH = 64  # pages each vector's query returns at first (widened x4 until the top k is exact)
_SCROLL_PAGE = 1024


@dataclass(frozen=True)
class VisualHit:
    doc_id: str
    page: int  # 1-based
    score: float  # the best chunk's cosine + POOLED_WEIGHT * the pooled vector's cosine (module docstring)


class VisualIndexLockedError(RuntimeError):
    """The embedded index folder is held by another process."""


class QdrantUnavailableError(ConnectionError):
    """The Qdrant server at the given URL does not answer."""


@dataclass(frozen=True)
class _PagePoint:
    """A validated page, ready for a backend: float32 vectors, zero-norm chunk rows dropped."""

    id: str
    doc_id: str
    page: int
    pooled: np.ndarray  # (dim,) float32
    chunks: np.ndarray  # (n, dim) float32, 1 <= n <= MAX_CHUNKS_PER_PAGE


def page_point_id(doc_id: str, page: int) -> str:
    """The deterministic point id of a page: uuid5 of "doc_id/page"."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc_id}/{page}"))


def _hit(payload: dict[str, Any], score: float) -> VisualHit:
    return VisualHit(doc_id=payload["doc_id"], page=int(payload["page"]), score=float(score))


def _page_score(best: float, pooled: float) -> float:
    """The page score (module docstring) from the best chunk's cosine and the pooled vector's."""
    return best + POOLED_WEIGHT * pooled


def _by_id(hits: list[VisualHit]) -> dict[str, VisualHit]:
    return {page_point_id(h.doc_id, h.page): h for h in hits}


class _Backend(Protocol):
    """What the facade needs from an engine; each method is a direct translation, no logic."""

    def upsert(self, points: list[_PagePoint]) -> None: ...
    def delete_ids(self, ids: list[str]) -> None: ...
    def delete_doc(self, doc_id: str) -> None: ...
    def nearest(self, query: np.ndarray, using: str, limit: int, doc_ids: list[str] | None,
                ids: list[str] | None) -> list[VisualHit]: ...
    def doc_pages(self, doc_id: str) -> set[int]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...


class _EdgeBackend:
    """Embedded: a qdrant-edge shard in ``folder/collection``, guarded by ``folder/collection.lock``."""

    def __init__(self, folder: Path, collection: str, dim: int) -> None:
        import portalocker  # a dependency of qdrant-client; cross-platform file lock
        import qdrant_edge as qe

        self._qe = qe
        folder.mkdir(parents=True, exist_ok=True)
        shard_dir = folder / collection
        lock_path = folder / f"{collection}.lock"
        self._lock_file = lock_path.open("a")
        try:
            portalocker.lock(self._lock_file, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.exceptions.LockException as e:
            self._lock_file.close()
            raise VisualIndexLockedError(
                f"the visual index {shard_dir} is open in another process (lock {lock_path}); close that "
                "process first, or serve the index from a Qdrant server (pass url=) for concurrent access"
            ) from e
        config = qe.EdgeConfig(
            vectors={
                POOLED: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine),
                CHUNKS: qe.EdgeVectorParams(
                    size=dim,
                    distance=qe.Distance.Cosine,
                    multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
                    hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000),
                ),
            }
        )
        try:
            if (shard_dir / "segments").is_dir():
                self._shard = qe.EdgeShard.load(str(shard_dir), config)
                logger.debug("opened visual index %s", shard_dir)
            else:
                self._shard = qe.EdgeShard.create(str(shard_dir), config)
                self._shard.update(qe.UpdateOperation.create_field_index("doc_id", qe.PayloadSchemaType.Keyword))
                logger.info("created visual index %s (dim=%d)", shard_dir, dim)
        except Exception as e:  # qdrant-edge raises plain Exception
            self._release_lock()
            raise RuntimeError(
                f"cannot open the visual index {shard_dir} as vectors {POOLED!r} and {CHUNKS!r} of dim {dim}: {e}"
            ) from e

    def _filter(self, doc_ids: list[str] | None, ids: list[str] | None):
        qe = self._qe
        must = ([] if doc_ids is None else [qe.FieldCondition("doc_id", match=qe.MatchAny(doc_ids))]) + (
            [] if ids is None else [qe.HasIdCondition(set(ids))])
        return qe.Filter(must=must) if must else None

    def upsert(self, points: list[_PagePoint]) -> None:
        qe = self._qe
        self._shard.update(
            qe.UpdateOperation.upsert_points(
                [
                    qe.Point(p.id, {POOLED: p.pooled, CHUNKS: p.chunks}, {"doc_id": p.doc_id, "page": p.page})
                    for p in points
                ]
            )
        )

    def delete_ids(self, ids: list[str]) -> None:
        self._shard.update(self._qe.UpdateOperation.delete_points(ids))

    def delete_doc(self, doc_id: str) -> None:
        self._shard.update(self._qe.UpdateOperation.delete_points_by_filter(self._filter([doc_id], None)))

    def nearest(self, query: np.ndarray, using: str, limit: int, doc_ids: list[str] | None,
                ids: list[str] | None) -> list[VisualHit]:
        qe = self._qe
        vector = query[None, :] if using == CHUNKS else query  # a one-row multivector for MaxSim
        points = self._shard.query(
            qe.QueryRequest(
                limit=limit,
                query=qe.Query.Nearest(vector, using=using),
                filter=self._filter(doc_ids, ids),
                params=qe.SearchParams(exact=True),
                with_payload=True,
            )
        )
        return [_hit(p.payload, p.score) for p in points]

    def doc_pages(self, doc_id: str) -> set[int]:
        qe = self._qe
        pages: set[int] = set()
        offset = None
        while True:
            records, offset = self._shard.scroll(
                qe.ScrollRequest(
                    offset=offset,
                    limit=_SCROLL_PAGE,
                    filter=self._filter([doc_id], None),
                    with_payload=qe.PayloadSelector.Include(["page"]),
                )
            )
            pages.update(int(r.payload["page"]) for r in records)
            if offset is None:
                return pages

    def count(self) -> int:
        return self._shard.count(self._qe.CountRequest(exact=True))

    def close(self) -> None:
        self._shard.flush()
        self._shard.close()
        self._release_lock()

    def _release_lock(self) -> None:
        import portalocker

        portalocker.unlock(self._lock_file)
        self._lock_file.close()


class _ServerBackend:
    """Remote: a collection on a Qdrant server or cluster, through qdrant-client (REST)."""

    def __init__(self, url: str, api_key: str | None, collection: str, dim: int) -> None:
        from qdrant_client import models

        self._models = models
        self._url = url
        self._collection = collection
        self._client = self._make_client(url, api_key)
        with self._reachable():
            exists = self._client.collection_exists(collection)
            if exists:
                params = self._client.get_collection(collection).config.params.vectors
                found = {name: v.size for name, v in params.items()} if isinstance(params, dict) else {"": params.size}
                if found.get(POOLED) != dim or found.get(CHUNKS) != dim:
                    raise ValueError(
                        f"collection {collection!r} at {url} has vectors {found}; expected {POOLED!r} and "
                        f"{CHUNKS!r} of dim {dim}: pass dim= to match, or another collection="
                    )
            else:
                self._create(dim)

    @staticmethod
    def _make_client(url: str, api_key: str | None):
        from qdrant_client import QdrantClient

        return QdrantClient(url=url, api_key=api_key)

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        from qdrant_client.http.exceptions import ResponseHandlingException

        try:
            yield
        except ResponseHandlingException as e:
            raise QdrantUnavailableError(
                f"cannot reach the Qdrant server at {self._url} ({e}); check that the Qdrant server is "
                "running and that the URL is right"
            ) from e

    def _create(self, dim: int) -> None:
        models = self._models
        self._client.create_collection(
            self._collection,
            vectors_config={
                POOLED: models.VectorParams(size=dim, distance=models.Distance.COSINE),
                CHUNKS: models.VectorParams(
                    size=dim,
                    distance=models.Distance.COSINE,
                    multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                    hnsw_config=models.HnswConfigDiff(m=0),
                ),
            },
        )
        self._client.create_payload_index(self._collection, "doc_id", models.PayloadSchemaType.KEYWORD)
        logger.info("created collection %r at %s (dim=%d)", self._collection, self._url, dim)

    def _filter(self, doc_ids: list[str] | None, ids: list[str] | None):
        models = self._models
        must = ([] if doc_ids is None else [models.FieldCondition(key="doc_id", match=models.MatchAny(any=doc_ids))]) + (
            [] if ids is None else [models.HasIdCondition(has_id=ids)])
        return models.Filter(must=must) if must else None

    def upsert(self, points: list[_PagePoint]) -> None:
        models = self._models
        structs = [
            models.PointStruct(
                id=p.id,
                vector={POOLED: p.pooled.tolist(), CHUNKS: p.chunks.tolist()},
                payload={"doc_id": p.doc_id, "page": p.page},
            )
            for p in points
        ]
        with self._reachable():
            self._client.upsert(self._collection, points=structs, wait=True)

    def delete_ids(self, ids: list[str]) -> None:
        with self._reachable():
            self._client.delete(self._collection, points_selector=self._models.PointIdsList(points=ids), wait=True)

    def delete_doc(self, doc_id: str) -> None:
        selector = self._models.FilterSelector(filter=self._filter([doc_id], None))
        with self._reachable():
            self._client.delete(self._collection, points_selector=selector, wait=True)

    def nearest(self, query: np.ndarray, using: str, limit: int, doc_ids: list[str] | None,
                ids: list[str] | None) -> list[VisualHit]:
        vector = [query.tolist()] if using == CHUNKS else query.tolist()  # a one-row multivector for MaxSim
        with self._reachable():
            points = self._client.query_points(
                self._collection,
                query=vector,
                using=using,
                query_filter=self._filter(doc_ids, ids),
                search_params=self._models.SearchParams(exact=True),
                limit=limit,
                with_payload=True,
            ).points
        return [_hit(p.payload, p.score) for p in points]

    def doc_pages(self, doc_id: str) -> set[int]:
        pages: set[int] = set()
        offset = None
        with self._reachable():
            while True:
                records, offset = self._client.scroll(
                    self._collection,
                    scroll_filter=self._filter([doc_id], None),
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=["page"],
                )
                pages.update(int(r.payload["page"]) for r in records)
                if offset is None:
                    return pages

    def count(self) -> int:
        with self._reachable():
            return self._client.count(self._collection, exact=True).count

    def close(self) -> None:
        self._client.close()


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
        self._backend: _Backend | None = (
            _EdgeBackend(Path(path), collection, dim)
            if path is not None
            else _ServerBackend(url, api_key, collection, dim)
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
    def _open(self) -> _Backend:
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
        batch: list[_PagePoint] = []
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
            raise ValueError(f"first_stage must be an int >= k={k} (pages kept before the exact scoring), got {first_stage!r}")
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

    def _checked_query(self, query: np.ndarray, k: int, doc_ids: Sequence[str] | None) -> tuple[np.ndarray, list[str] | None]:
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

    def _validate_page(self, doc_id: str, page: int, pooled: np.ndarray, chunks: np.ndarray) -> _PagePoint:
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
        return _PagePoint(page_point_id(doc_id, int(page)), doc_id, int(page), pooled, chunks)

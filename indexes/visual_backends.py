"""The engines behind the visual index: one Protocol, two implementations, no scoring logic.

One point per page, id ``uuid5(doc_id/page)``, payload ``{"doc_id", "page"}`` (1-based), and two
named vectors: ``pooled``, the page's word-weighted mean vector (cosine); ``chunks``, the page's
chunk vectors (1-108 rows, cosine, MaxSim comparator, no HNSW graph: they are always scored
exactly, over all pages or over the pages a first stage kept). The facade ``VisualIndex``
(indexes/visual.py) validates pages and scores them; a backend translates its calls to one engine:

- embedded (``path=``, ``EdgeBackend``): qdrant-edge's ``EdgeShard``, the in-process Rust engine,
  one shard per collection under the folder. Chosen over qdrant-client's local mode by
  ``evals/bench_qdrant.py`` (2,500 pages, 150k vectors, 2 cores): a fresh process answers its
  first query in 0.3-0.4 s instead of 13.5 s, with 30 MB of private memory instead of 2.7 GB
  (the vectors are mmapped files, shared and reclaimable), and exact MaxSim takes about 1 ms
  within one document (283 pages) and 12 ms over the whole store, instead of 130-160 ms.
- server (``url=``, ``ServerBackend``): a Qdrant server or cluster through qdrant-client's REST API.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

logger = logging.getLogger(__name__)

POOLED = "pooled"
CHUNKS = "chunks"
_SCROLL_PAGE = 1024


@dataclass(frozen=True)
class VisualHit:
    doc_id: str
    page: int  # 1-based
    score: float  # the best chunk's cosine + POOLED_WEIGHT * the pooled vector's cosine (indexes/visual.py)


class VisualIndexLockedError(RuntimeError):
    """The embedded index folder is held by another process."""


class QdrantUnavailableError(ConnectionError):
    """The Qdrant server at the given URL does not answer."""


@dataclass(frozen=True)
class PagePoint:
    """A validated page, ready for a backend: float32 vectors, zero-norm chunk rows dropped."""

    id: str
    doc_id: str
    page: int
    pooled: np.ndarray  # (dim,) float32
    chunks: np.ndarray  # (n, dim) float32, 1 <= n <= MAX_CHUNKS_PER_PAGE (indexes/visual.py)


def _hit(payload: dict[str, Any], score: float) -> VisualHit:
    return VisualHit(doc_id=payload["doc_id"], page=int(payload["page"]), score=float(score))


class Backend(Protocol):
    """What the facade needs from an engine; each method is a direct translation, no logic."""

    def upsert(self, points: list[PagePoint]) -> None: ...
    def delete_ids(self, ids: list[str]) -> None: ...
    def delete_doc(self, doc_id: str) -> None: ...
    def nearest(self, query: np.ndarray, using: str, limit: int, doc_ids: list[str] | None,
                ids: list[str] | None) -> list[VisualHit]: ...
    def doc_pages(self, doc_id: str) -> set[int]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...


class EdgeBackend:
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

    def upsert(self, points: list[PagePoint]) -> None:
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


class ServerBackend:
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
        must = ([] if doc_ids is None
                else [models.FieldCondition(key="doc_id", match=models.MatchAny(any=doc_ids))]) + (
            [] if ids is None else [models.HasIdCondition(has_id=ids)])
        return models.Filter(must=must) if must else None

    def upsert(self, points: list[PagePoint]) -> None:
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

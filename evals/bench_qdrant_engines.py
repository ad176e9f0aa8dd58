"""The engines that evals/bench_qdrant.py compares, and the synthetic corpus they hold.

Each engine has an ingest, an open and a query function: qdrant-client's local mode
(``QdrantClient(path=...)``, pure Python + numpy, points pickled in SQLite), qdrant-edge
(``qdrant_edge.EdgeShard``, the in-process Rust engine) and ``docrefrag.indexes.visual.VisualIndex``
(qdrant-edge behind the facade, with its validation and folder lock). The corpus is synthetic random
unit vectors shaped like the visual index: one point per page, a ``pooled`` 384-d vector and a
``chunks`` multivector (MaxSim) of 30-90 vectors per page, payload ``doc_id`` and ``page``;
documents of 100-300 pages. A query is exact MaxSim, within one document (payload filter) or over
the whole store, optionally after a first stage of ``FIRST_STAGE`` pages by the pooled vector.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DIM = 384
COLLECTION = "pages"
BATCH_PAGES = 32
FIRST_STAGE = 100
ENGINES = ("client-local", "edge", "edge-optimized", "visual-index")


@dataclass(frozen=True)
class Corpus:
    """Synthetic corpus layout: documents of 100-300 pages, 30-90 chunk vectors per page."""

    pages: int
    seed: int = 0

    def docs(self) -> list[tuple[str, int]]:
        """(doc_id, n_pages) until `pages` pages in total."""
        rng = np.random.default_rng(self.seed)
        out: list[tuple[str, int]] = []
        left = self.pages
        while left > 0:
            n = min(int(rng.integers(100, 301)), left)
            doc_id = hashlib.sha256(f"doc-{len(out)}".encode()).hexdigest()
            out.append((doc_id, n))
            left -= n
        return out

    def batches(self) -> Iterator[list[tuple[str, int, np.ndarray, np.ndarray]]]:
        """Batches of (doc_id, page, pooled (DIM,), chunks (n, DIM)), unit vectors."""
        rng = np.random.default_rng(self.seed + 1)
        batch: list[tuple[str, int, np.ndarray, np.ndarray]] = []
        for doc_id, n_pages in self.docs():
            for page in range(1, n_pages + 1):
                n = int(rng.integers(30, 91))
                chunks = rng.standard_normal((n, DIM), dtype=np.float32)  # (n, DIM)
                chunks /= np.linalg.norm(chunks, axis=1, keepdims=True)
                pooled = chunks.mean(axis=0)  # (DIM,)
                pooled /= np.linalg.norm(pooled)
                batch.append((doc_id, page, pooled, chunks))
                if len(batch) == BATCH_PAGES:
                    yield batch
                    batch = []
        if batch:
            yield batch


def point_id(doc_id: str, page: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc_id}/{page}"))


# ---------------------------------------------------------------- qdrant-client local mode


def client_local_ingest(path: Path, corpus: Corpus) -> None:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(path))
    client.create_collection(
        COLLECTION,
        vectors_config={
            "pooled": models.VectorParams(size=DIM, distance=models.Distance.COSINE),
            "chunks": models.VectorParams(
                size=DIM,
                distance=models.Distance.COSINE,
                multivector_config=models.MultiVectorConfig(
                    comparator=models.MultiVectorComparator.MAX_SIM
                ),
            ),
        },
    )
    for batch in corpus.batches():
        client.upsert(
            COLLECTION,
            points=[
                models.PointStruct(
                    id=point_id(d, p),
                    vector={"pooled": pooled.tolist(), "chunks": chunks.tolist()},
                    payload={"doc_id": d, "page": p},
                )
                for d, p, pooled, chunks in batch
            ],
        )
    client.close()


def client_local_open(path: Path):
    from qdrant_client import QdrantClient

    return QdrantClient(path=str(path))


def client_local_query(client, q: np.ndarray, doc_id: str | None, first_stage: bool) -> list:
    from qdrant_client import models

    flt = (
        None
        if doc_id is None
        else models.Filter(must=[models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))])
    )
    prefetch = (
        models.Prefetch(query=q.tolist(), using="pooled", limit=FIRST_STAGE, filter=flt)
        if first_stage
        else None
    )
    return client.query_points(
        COLLECTION,
        query=[q.tolist()],
        using="chunks",
        prefetch=prefetch,
        query_filter=flt,
        limit=10,
        with_payload=True,
    ).points


# ---------------------------------------------------------------- qdrant-edge


def edge_ingest(path: Path, corpus: Corpus, optimize: bool) -> None:
    import qdrant_edge as qe

    config = qe.EdgeConfig(
        vectors={
            "pooled": qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine),
            "chunks": qe.EdgeVectorParams(
                size=DIM,
                distance=qe.Distance.Cosine,
                multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
                # m=0: no HNSW graph on the multivector (it is only scored exactly / reranked)
                hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000),
            ),
        }
    )
    shard = qe.EdgeShard.create(str(path), config)
    shard.update(qe.UpdateOperation.create_field_index("doc_id", qe.PayloadSchemaType.Keyword))
    for batch in corpus.batches():
        shard.update(
            qe.UpdateOperation.upsert_points(
                [
                    qe.Point(point_id(d, p), {"pooled": pooled, "chunks": chunks}, {"doc_id": d, "page": p})
                    for d, p, pooled, chunks in batch
                ]
            )
        )
    if optimize:
        shard.optimize()
    shard.flush()
    shard.close()


def edge_open(path: Path):
    import qdrant_edge as qe

    return qe.EdgeShard.load(str(path))


def edge_query(shard, q: np.ndarray, doc_id: str | None, first_stage: bool) -> list:
    import qdrant_edge as qe

    flt = (
        None
        if doc_id is None
        else qe.Filter(must=[qe.FieldCondition("doc_id", match=qe.MatchValue(doc_id))])
    )
    exact = qe.SearchParams(exact=True)
    prefetches = (
        [qe.Prefetch(limit=FIRST_STAGE, query=qe.Query.Nearest(q, using="pooled"), filter=flt, params=exact)]
        if first_stage
        else None
    )
    return shard.query(
        qe.QueryRequest(
            limit=10,
            query=qe.Query.Nearest(q[None, :], using="chunks"),
            prefetches=prefetches,
            filter=None if first_stage else flt,
            params=exact,
            with_payload=True,
        )
    )


# ---------------------------------------------------------------- indexes.visual.VisualIndex (the facade)


def visual_index_ingest(path: Path, corpus: Corpus) -> None:
    from docrefrag.indexes.visual import VisualIndex

    with VisualIndex(path=path, dim=DIM) as index:
        for batch in corpus.batches():
            index.upsert_pages(batch, batch_size=BATCH_PAGES)


def visual_index_open(path: Path):
    from docrefrag.indexes.visual import VisualIndex

    return VisualIndex(path=path, dim=DIM)


def visual_index_query(index, q: np.ndarray, doc_id: str | None, first_stage: bool) -> list:
    return index.search(q, k=10, doc_ids=None if doc_id is None else [doc_id],
                        first_stage=FIRST_STAGE if first_stage else None)

"""Shared fixtures: the real default text embedder and page encoder (loaded once per session),
ingest into a store in tmp_path, cheap generated PDFs, and a store-consistency check.

Torch runs single-threaded here, as in the ingest workers: on a 2-core machine with another job on
one core, a MiniLM forward over a 30-word block took 0.83 s with torch's default 2 threads and
0.02 s with 1 (the second thread waits on a busy core). Subprocesses get the same setting through
`subprocess_env()`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pymupdf
import pytest
from docrefrag.indexes.ingest import Ingestor, IngestResult
from docrefrag.indexes.store import Store

REPO = Path(__file__).resolve().parent.parent
TABLES = ("documents", "pages", "chunks", "tokens")
ANIMALS = ["otter", "heron", "badger", "lynx", "marten", "osprey", "bison", "ibex"]


def subprocess_env() -> dict[str, str]:
    """The test process's environment (DOCREFRAG_CACHE unchanged), torch single-threaded."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="session")
def embedder():
    import torch
    from docrefrag.core.text_embedder import TextEmbedder

    torch.set_num_threads(1)
    return TextEmbedder.default()


@pytest.fixture(scope="session")
def encoder(embedder):
    from docrefrag.core.page_encoder import LayoutGridEncoder

    return LayoutGridEncoder(embedder)


@pytest.fixture(scope="session")
def ingest() -> Iterator[Callable[..., list[IngestResult]]]:
    """ingest(store, *paths) -> results, as `docrefrag ingest --workers 1` does it: one worker process
    parses and encodes with its own single-threaded default encoder; no progress bar.

    One Ingestor serves the session, its `store` set per call: its worker loads MiniLM once
    (about 5 s on this machine) instead of once per ingest.
    """
    with Ingestor(None, workers=1, show_progress=False) as ingestor:

        def run(store: Store, *paths: Path | str) -> list[IngestResult]:
            ingestor.store = store
            try:
                return ingestor.ingest(paths)
            finally:
                ingestor.store = None

        yield run


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A new, empty store in tmp_path/store (closed after the test)."""
    with Store(tmp_path / "store", create=True) as s:
        yield s


@pytest.fixture(scope="session")
def light_pdf() -> Callable[..., Path]:
    """light_pdf(path, pages, tag="survey") -> path: a cheap text PDF (about 30 words a page).

    Page n names station s{n:03d} and one animal, so each page has a few distinctive words.
    """

    def make(path: Path, pages: int, tag: str = "survey") -> Path:
        doc = pymupdf.open()
        for n in range(1, pages + 1):
            page = doc.new_page(width=595, height=842)
            page.insert_text((50, 60), f"Field {tag} page {n}", fontsize=16)
            page.insert_textbox(
                pymupdf.Rect(50, 90, 545, 300),
                f"Section {n} records the {ANIMALS[n % len(ANIMALS)]} count near station s{n:03d} during "
                f"the spring {tag}. Observers logged weather, water level and habitat notes for "
                f"station s{n:03d}.",
                fontsize=11,
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        doc.save(path)
        doc.close()
        return path

    return make


def table_counts(root: Path, doc_id: str) -> dict[str, int]:
    """Rows of `doc_id` in each catalog table (read through a separate connection)."""
    db = sqlite3.connect(root / "catalog.sqlite")
    try:
        return {t: db.execute(f"SELECT COUNT(*) FROM {t} WHERE doc_id = ?", (doc_id,)).fetchone()[0] for t in TABLES}
    finally:
        db.close()


@pytest.fixture(scope="session")
def counts() -> Callable[[Path, str], dict[str, int]]:
    return table_counts


def _check_consistent(store: Store) -> None:
    """Invariants of a store after any ingest, failed or not.

    - no row, vector or render belongs to a document missing from `documents`;
    - every page row is 1..n_pages, at most once (primary key), and a ready document has them all;
    - a page without error has a tokens row and, if it has words, chunks, a vector point and a render;
    - BM25 holds exactly the pages with chunks of the ready documents;
    - the visual index holds exactly the pages with words of a ready document (of a resumable
      one, at least those).
    """
    db = store.db
    docs = {d.doc_id: d for d in store.documents()}
    for table in (*TABLES[1:], "branch_health"):
        orphans = db.execute(f"SELECT DISTINCT doc_id FROM {table} WHERE doc_id NOT IN "
                             "(SELECT doc_id FROM documents)").fetchall()
        assert not orphans, f"{table} has rows of unknown documents {orphans}"
    renders = store.root / "renders"
    if renders.is_dir():
        assert {p.name for p in renders.iterdir()} <= set(docs), "renders of unknown documents"
    bm25 = store.bm25()
    expected_bm25: set[tuple[str, int]] = set()
    visual_total = 0
    for doc_id, d in docs.items():
        rows = db.execute("SELECT page, n_words, error FROM pages WHERE doc_id = ?", (doc_id,)).fetchall()
        pages = [r[0] for r in rows]
        assert set(pages) <= set(range(1, d.n_pages + 1)), f"{doc_id}: pages {pages} outside 1..{d.n_pages}"
        if d.status == "ready":
            assert sorted(pages) == list(range(1, d.n_pages + 1)), f"{doc_id} is ready with pages {pages}"
        token_pages = {r[0] for r in db.execute("SELECT page FROM tokens WHERE doc_id = ?", (doc_id,))}
        chunk_pages = {r[0] for r in db.execute("SELECT DISTINCT page FROM chunks WHERE doc_id = ?", (doc_id,))}
        ok = {p for p, _, err in rows if err is None}
        worded = {p for p, n, err in rows if err is None and n > 0}
        assert token_pages == ok, f"{doc_id}: tokens for {sorted(token_pages)}, parsed pages {sorted(ok)}"
        assert chunk_pages == worded, f"{doc_id}: chunks for {sorted(chunk_pages)}, pages with words {sorted(worded)}"
        for p in worded:
            assert store.render_path(doc_id, p).is_file(), f"{doc_id} page {p} has no render"
        visual_pages = store.visual.doc_pages(doc_id)
        where = f"{doc_id}: vectors for {sorted(visual_pages)}, pages with words {sorted(worded)}"
        if d.status == "ready":
            assert visual_pages == worded, where
        else:  # a page's vectors are upserted just before its rows commit (idempotently, by point id)
            assert worded <= visual_pages <= set(range(1, d.n_pages + 1)), where
        visual_total += len(visual_pages)
        if d.status == "ready":
            expected_bm25 |= {(doc_id, p) for p in chunk_pages}
    assert set(bm25.page_keys) == expected_bm25
    assert store.visual.count() == visual_total, "the visual index holds pages of unknown documents"


@pytest.fixture(scope="session")
def check_consistent() -> Callable[[Store], None]:
    return _check_consistent

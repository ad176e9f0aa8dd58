"""Shared fixtures: the real default text embedder and page encoder (loaded once per session),
ingest into a store in tmp_path, cheap generated PDFs, and a store-consistency check; for the ask
graph's tests, a generated 6-page report (the answer in a ruled table on page 4, a near-duplicate
2018 table on page 2, ingested once per session; each test starts with its experience memory empty,
so that no earlier test's validated answer seeds its searches) and scripted chat models
(`GenericFakeChatModel`, replies in the order the graph calls it, every prompt recorded and
classified); `tiny_llama`, the tiny random Llama decoder of the reader and training tests.

Torch runs single-threaded here, as in the ingest workers: on a 2-core machine with another job on
one core, a MiniLM forward over a 30-word block took 0.83 s with torch's default 2 threads and
0.02 s with 1 (the second thread waits on a busy core). Subprocesses get the same setting through
`subprocess_env()`.

Both folders share this file (pytest loads it for tests/unit and tests/integration; `pythonpath` in
pyproject.toml puts tests/ on sys.path for `from conftest import ...`). A test in tests/unit may not
use the fixtures that load weights or start worker processes (`HEAVY_FIXTURES`: collection fails),
and runs with an empty model cache, it and its subprocesses (a `model_dir` call raises
ModelNotFoundError naming that cache): the unit folder needs neither `docrefrag models fetch` nor the
seconds a model load takes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pymupdf
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from docrefrag.agents import prompts
from docrefrag.indexes.discovery import IngestResult
from docrefrag.indexes.ingest import Ingestor
from docrefrag.indexes.store import Store

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "tests" / "unit"
HEAVY_FIXTURES = {"embedder", "encoder", "ingest", "report", "dr"}
TABLES = ("documents", "pages", "chunks", "tokens")
ANIMALS = ["otter", "heron", "badger", "lynx", "marten", "osprey", "bison", "ibex"]


def subprocess_env() -> dict[str, str]:
    """The test process's environment (DOCREFRAG_CACHE unchanged), torch single-threaded."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        heavy = sorted(HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())))
        if heavy and item.path.is_relative_to(UNIT):
            raise pytest.UsageError(f"{item.nodeid} uses {', '.join(heavy)}, which load model weights or start "
                                    "worker processes: move it to tests/integration")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A unit test, its fixtures and its subprocesses see an empty model cache (DOCREFRAG_CACHE)."""
    if not item.path.is_relative_to(UNIT):
        return (yield)
    before = os.environ.get("DOCREFRAG_CACHE")
    os.environ["DOCREFRAG_CACHE"] = str(Path(tempfile.gettempdir()) / "docrefrag-unit-tests-use-no-models")
    try:
        return (yield)
    finally:
        if before is None:
            del os.environ["DOCREFRAG_CACHE"]
        else:
            os.environ["DOCREFRAG_CACHE"] = before


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
      one, at least those);
    - the evidence graph is consistent (`_check_graphs`).
    """
    db = store.db
    docs = {d.doc_id: d for d in store.catalog.documents()}
    for table in (*TABLES[1:], "branch_health"):
        orphans = db.execute(f"SELECT DISTINCT doc_id FROM {table} WHERE doc_id NOT IN "
                             "(SELECT doc_id FROM documents)").fetchall()
        assert not orphans, f"{table} has rows of unknown documents {orphans}"
    renders = store.root / "renders"
    if renders.is_dir():
        assert {p.name for p in renders.iterdir()} <= set(docs), "renders of unknown documents"
    bm25 = store.bm25.index()
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
            assert store.pages.render_path(doc_id, p).is_file(), f"{doc_id} page {p} has no render"
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
    _check_graphs(store, docs)


def _check_graphs(store: Store, docs: dict) -> None:
    """The evidence graph: no node or edge of an unknown document or failed page, every edge between
    existing nodes, and a ready document's graph exactly the one a rebuild from its stored pages gives
    (so a resumed or repeated ingest left nothing extra, and nothing missing)."""
    from docrefrag.indexes import evidence_graph

    db = store.db
    for table in ("elements", "edges", "graphs"):
        orphans = db.execute(f"SELECT DISTINCT doc_id FROM {table} WHERE doc_id NOT IN "
                             "(SELECT doc_id FROM documents)").fetchall()
        assert not orphans, f"{table} has rows of unknown documents {orphans}"
    for doc_id, d in docs.items():
        ok = {r[0] for r in db.execute("SELECT page FROM pages WHERE doc_id = ? AND error IS NULL", (doc_id,))}
        nodes = set(db.execute("SELECT page, element FROM elements WHERE doc_id = ?", (doc_id,)).fetchall())
        assert {p for p, _ in nodes} - {0} == ok, f"{doc_id}: graph nodes on pages {sorted({p for p, _ in nodes})}"
        for sp, s, dp, dd in db.execute("SELECT src_page, src, dst_page, dst FROM edges WHERE doc_id = ?", (doc_id,)):
            assert (sp, s) in nodes and (dp, dd) in nodes, f"{doc_id}: edge {(sp, s)} -> {(dp, dd)} of a missing node"
        if d.status != "ready":
            continue
        assert evidence_graph.built(db, doc_id), f"{doc_id} is ready without its document-level graph"
        fresh = sqlite3.connect(":memory:")
        db.backup(fresh)
        evidence_graph.rebuild(fresh, doc_id, store.meta.text_dim)
        for table in ("elements", "edges"):
            query = f"SELECT * FROM {table} WHERE doc_id = ? ORDER BY 1, 2, 3, 4, 5, 6"
            assert db.execute(query, (doc_id,)).fetchall() == fresh.execute(query, (doc_id,)).fetchall(), \
                f"{doc_id}: the stored {table} differ from a rebuild of the graph"
        fresh.close()


@pytest.fixture(scope="session")
def check_consistent() -> Callable[[Store], None]:
    return _check_consistent


# ---------------------------------------------------------------- the ask graph's report and scripted models

QUESTION = "How many passengers did Northfield report in 2019?"
HYDE = "Northfield reported its passenger total for 2019 in the operator table of the annual review."
ANSWER_PAGE = 4
DISTRACTOR_PAGE = 2
PAGE_SIZE = (595, 842)
FILLER = {
    1: "The transit authority summarises its network, fleet renewal and station works for the period under review.",
    2: "Ridership recovered steadily as new timetables were introduced across the regional lines.",
    3: "Maintenance crews replaced signalling equipment and resurfaced platforms at several stations.",
    4: "Operators submitted audited passenger counts for the reporting year, collected at ticket gates.",
    5: "Fare policy remained unchanged while contactless payment was extended to all bus routes.",
    6: "The outlook section describes planned extensions, funding sources and procurement timelines.",
}
REPORT_TABLES = {
    DISTRACTOR_PAGE: ("2018", [["Northfield", "2018", "3,907"], ["Eastbrook", "2018", "2,114"]]),
    ANSWER_PAGE: ("2019", [["Eastbrook", "2019", "2,305"], ["Northfield", "2019", "4,812"],
                           ["Westmere", "2019", "1,566"]]),
}
NEW_QUERY = "Northfield passenger count table for the year 2019"


def _ruled_table(page: pymupdf.Page, rows: list[list[str]], top: float, caption: str) -> None:
    """Cells in three 160-pt columns, 22-pt rows, every row and column ruled (pymupdf4llm finds it)."""
    for i, row in enumerate(rows):
        y = top + i * 22
        for j, cell in enumerate(row):
            page.insert_text((60 + j * 160, y + 15), cell, fontsize=11)
        page.draw_line((55, y), (535, y))
    bottom = top + len(rows) * 22
    page.draw_line((55, bottom), (535, bottom))
    for j in range(4):
        page.draw_line((55 + j * 160, top), (55 + j * 160, bottom))
    page.insert_text((50, bottom + 20), caption, fontsize=10)


def make_report(path: Path) -> Path:
    """Six A4 pages of filler without digits; passenger tables for 2018 (page 2) and 2019 (page 4)."""
    doc = pymupdf.open()
    for n, filler in FILLER.items():
        page = doc.new_page(width=PAGE_SIZE[0], height=PAGE_SIZE[1])
        page.insert_text((50, 60), f"Regional transit review, part {'ABCDEF'[n - 1]}", fontsize=16)
        page.insert_textbox(pymupdf.Rect(50, 90, 545, 300), f"{filler} " * 3, fontsize=11)
        if n in REPORT_TABLES:
            year, rows = REPORT_TABLES[n]
            _ruled_table(page, [["Operator", "Year", "Passengers"], *rows], 320,
                         f"Passengers reported by operator, {year}.")
    doc.save(path)
    doc.close()
    return path


# the fixed part of each prompt template, to tell which agent called the model
PROMPT_MARKERS = {
    "decompose": prompts.DECOMPOSE.split("{")[0],
    "hyde": prompts.HYDE.split("{")[0],
    "answer": prompts.ANSWER_USER.rsplit("}", 1)[1],
    "validate": prompts.VALIDATE.rsplit("}", 1)[1],
    "refine": prompts.REFINE.split("{")[0],
}


def prompt_kind(prompt: str) -> str:
    kinds = [k for k, marker in PROMPT_MARKERS.items()  # the judge's prompt repeats the answer's
             if marker in prompt and not (k == "answer" and PROMPT_MARKERS["validate"] in prompt)]
    assert len(kinds) == 1, f"cannot tell which agent sent {prompt[:200]!r}"
    return kinds[0]


class _Prompts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.seen: list[str] = []  # the last message of each call
        self.calls: list[list] = []  # every message of each call

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.seen.append(str(messages[0][-1].content))
        self.calls.append(messages[0])


def scripted(*replies: str | Exception) -> tuple[GenericFakeChatModel, list[str]]:
    """(model, prompts): the model answers `replies` in order (an exception is raised instead of
    replying); `prompts` collects the last message of every call."""

    def in_order():
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
            yield AIMessage(reply)

    recorder = _Prompts()
    return GenericFakeChatModel(messages=in_order(), callbacks=[recorder]), recorder.seen


def tool_call(name: str, **arguments) -> str:
    """A retrieval agent's tool call as the local model writes it (agents/tool_agent.py)."""
    return json.dumps({"name": name, "arguments": arguments})


def nodes_of(trace: list[dict]) -> list[str]:
    return [entry["node"] for entry in trace]


def entries(trace: list[dict], node: str) -> list[dict]:
    return [entry for entry in trace if entry["node"] == node]


def retrieved_pages(entry: dict) -> list[int]:
    return [h["page"] for h in entry["hits"]]


@pytest.fixture(scope="session")
def report(tmp_path_factory, ingest) -> tuple[Path, str]:
    """(store dir, doc id) of the ingested report."""
    folder = tmp_path_factory.mktemp("graph")
    pdf = make_report(folder / "transit-review.pdf")
    with Store(folder / "store", create=True) as store:
        (result,) = ingest(store, pdf)
        assert result.status == "added" and result.pages == len(FILLER), result
    return folder / "store", result.doc_id


@pytest.fixture(autouse=True)
def _report_memory_empty(request) -> None:
    """A test that uses the report finds no plan of an earlier test in its experience memory (graph/memory.py)."""
    if "report" in request.fixturenames:
        with Store(request.getfixturevalue("report")[0]) as store:
            store.memory.clear()


@pytest.fixture(scope="module")
def dr(report):
    import torch

    from docrefrag.api import DocRefrag

    torch.set_num_threads(1)  # as the embedder fixture: the machine's second core is busy
    with DocRefrag(store=report[0]) as api:
        yield api


# ---------------------------------------------------------------- a tiny random Llama decoder


def tiny_llama(tokenizer, hidden_size: int = 32, intermediate_size: int = 64, num_hidden_layers: int = 2,
               num_attention_heads: int = 4, num_key_value_heads: int = 2, seed: int | None = None, **config):
    """A randomly initialised `LlamaForCausalLM` over `tokenizer`'s vocabulary, torch seeded with `seed`
    first where one is given; `config`: further `LlamaConfig` fields (max_position_embeddings, say)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if seed is not None:
        torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size,
                                        intermediate_size=intermediate_size, num_hidden_layers=num_hidden_layers,
                                        num_attention_heads=num_attention_heads,
                                        num_key_value_heads=num_key_value_heads, **config))

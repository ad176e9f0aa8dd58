"""The CLI on bad input: `docrefrag ingest` reports each failed item on one line and exits 1 (some
items failed) or 2 (nothing done) without a traceback; a search without a store or for an unknown
document is one line; an ingest killed with SIGKILL resumes where it stopped, and one interrupted
with Ctrl-C says one line and leaks nothing.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, subprocess_env

from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "docrefrag", *args], capture_output=True, text=True,
                          cwd=REPO, env=subprocess_env(), timeout=timeout)


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture(scope="module")
def cli_ingest(tmp_path_factory, light_pdf):
    """`docrefrag ingest` over a good PDF and three bad items: (store dir, completed process, folder)."""
    folder = tmp_path_factory.mktemp("cli")
    light_pdf(folder / "good.pdf", 2, tag="census")
    (folder / "random.pdf").write_bytes(random.Random(1).randbytes(3000))
    (folder / "notes.txt").write_text("not a document\n")
    store = folder / "store"
    paths = [folder / n for n in ("good.pdf", "random.pdf", "notes.txt", "missing.pdf")]
    proc = _cli("ingest", *map(str, paths), "--store", str(store), "--workers", "1")
    return store, proc, folder


def test_cli_ingest_reports_each_failed_item_on_one_line(cli_ingest):
    store, proc, _ = cli_ingest
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.strip().splitlines()
    failed = [line for line in lines if line.startswith("failed")]
    assert len(lines) == 4 and len(failed) == 3, proc.stdout
    for name in ("random.pdf", "notes.txt", "missing.pdf"):
        assert sum(name in line for line in failed) == 1, (name, failed)
    (added,) = [line for line in lines if line.startswith("added")]
    assert "good.pdf" in added and "2 pages" in added
    assert (store / "catalog.sqlite").is_file()


def test_cli_search_without_a_store_says_how_to_make_one(tmp_path):
    missing = tmp_path / "no-store"
    proc = _cli("search", "rail passengers", "--store", str(missing))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "docrefrag ingest" in _one_line(proc.stderr)
    assert not missing.exists()  # a search must not create a store


def test_cli_search_for_an_unknown_doc_is_one_line(cli_ingest):
    store, _, _ = cli_ingest
    proc = _cli("search", "census", "--store", str(store), "--doc", "nosuchdoc")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "nosuchdoc" in _one_line(proc.stderr)
    assert proc.stdout == ""


BIG_PAGES = 40


def _committed_pages(root: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{root / 'catalog.sqlite'}?mode=ro", uri=True, timeout=5)
        try:
            return db.execute("SELECT COUNT(*) FROM pages").fetchone()[0]
        finally:
            db.close()
    except sqlite3.OperationalError:  # not created yet, or created without the table yet
        return 0


def test_killed_ingest_resumes(tmp_path, ingest, light_pdf, embedder, counts, check_consistent):
    root = tmp_path / "store"
    early = light_pdf(tmp_path / "early.pdf", 2, tag="census")
    with Store(root, create=True) as store:  # a ready document next to the one that gets killed
        (ready,) = ingest(store, early)
    big = light_pdf(tmp_path / "big.pdf", BIG_PAGES)
    command = [sys.executable, "-m", "docrefrag", "ingest", str(big), "--store", str(root), "--workers", "1"]

    log = tmp_path / "killed.stderr"
    with log.open("w") as stderr:  # a file, not a pipe: a full pipe would stall the ingest
        proc = subprocess.Popen(command, cwd=REPO, env=subprocess_env(), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 120
        while (done := _committed_pages(root) - 2) < 3:  # 2: the pages of early.pdf
            assert proc.poll() is None, f"ingest exited early ({proc.returncode}): {log.read_text()}"
            assert time.monotonic() < deadline, "ingest committed no pages in 120 s"
            time.sleep(0.02)
        with Store(root) as store:  # running now: the document names the process writing it
            running = {d.name: d.writer_pid for d in store.catalog.documents()}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its worker process
        proc.wait()
    assert done < BIG_PAGES, "the ingest finished before it could be killed"
    assert running == {"early.pdf": None, "big.pdf": proc.pid}

    docs = _cli("docs", "--store", str(root), "--json")
    assert docs.returncode == 0, docs.stderr
    status = {d["name"]: (d["status"], d["pages_done"], d["writer_pid"]) for d in json.loads(docs.stdout)}
    assert status["early.pdf"] == ("ready", 2, None)
    assert status["big.pdf"][0] == "ingesting" and 3 <= status["big.pdf"][1] < BIG_PAGES
    assert status["big.pdf"][2] is None  # killed: interrupted, not running
    plain = _cli("docs", "--store", str(root)).stdout
    assert re.search(r"interrupted \d+/40 \(rerun ingest to resume\) +big\.pdf", plain), plain

    with Store(root) as store:
        (partial,) = [d for d in store.catalog.documents() if d.name == "big.pdf"]
        check_consistent(store)
        searcher = HybridSearcher(store, embedder)
        hits = searcher.search("station s001 s002 s003 spring survey", k=10)
        assert hits and {h.doc_id for h in hits} == {ready.doc_id}
        assert searcher.search("station s001", k=5, doc_ids=[partial.doc_id]) == []
        assert not any(k[0] == partial.doc_id for k in store.bm25.index().page_keys)
        with pytest.raises(StoreError, match=r"'big.pdf' is only partly ingested \(big.pdf: \d+/40 pages\); rerun"):
            store.catalog.resolve("big.pdf")

    rerun = subprocess.run(command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert "Traceback" not in rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, rerun.stderr
    assert _one_line(rerun.stdout).startswith(f"resumed    {partial.doc_id}  {BIG_PAGES} pages")

    assert counts(root, partial.doc_id) == {"documents": 1, "pages": BIG_PAGES, "chunks": BIG_PAGES,
                                            "tokens": BIG_PAGES}
    with Store(root) as store:
        doc = store.catalog.find(partial.doc_id)
        assert (doc.status, doc.pages_done, doc.failed_pages) == ("ready", BIG_PAGES, 0)
        assert store.db.execute("SELECT COUNT(DISTINCT page), MIN(page), MAX(page) FROM pages WHERE doc_id = ?",
                                (partial.doc_id,)).fetchone() == (BIG_PAGES, 1, BIG_PAGES)
        assert store.visual.doc_pages(partial.doc_id) == set(range(1, BIG_PAGES + 1))
        assert store.visual.count() == BIG_PAGES + 2
        assert len(store.bm25.index().scope([partial.doc_id])) == BIG_PAGES
        check_consistent(store)
        hits = HybridSearcher(store, embedder).search("station s017", k=1, doc_ids=[partial.doc_id])
        assert [(h.doc_id, h.page) for h in hits] == [(partial.doc_id, 17)]


def _sigint_default() -> None:
    """A shell's background job (`pytest ... &`) ignores SIGINT, and its children would too: the CLI starts with
    SIGINT as a terminal's foreground process has it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("group", [True, False], ids=["ctrl-c", "sigint-to-the-cli"])
def test_an_interrupted_ingest_says_one_line_and_leaks_nothing(tmp_path, light_pdf, group):
    root = tmp_path / "store"
    big = light_pdf(tmp_path / "big.pdf", BIG_PAGES)
    command = [sys.executable, "-m", "docrefrag", "ingest", str(big), "--store", str(root), "--workers", "2"]
    log = tmp_path / "interrupted.stderr"
    with log.open("w") as stderr:  # the workers and multiprocessing's resource tracker write here too
        proc = subprocess.Popen(command, cwd=REPO, env=subprocess_env(), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=stderr, preexec_fn=_sigint_default)
    deadline = time.monotonic() + 120
    while _committed_pages(root) < 3:
        assert proc.poll() is None, f"ingest exited early ({proc.returncode}): {log.read_text()}"
        assert time.monotonic() < deadline, "ingest committed no pages in 120 s"
        time.sleep(0.02)
    if group:  # a terminal's Ctrl-C reaches the whole foreground process group
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 2
    time.sleep(1.0)  # the resource tracker reports leaks after the CLI has exited
    assert log.read_text() == "interrupted; rerun the same command to resume\n"
    with Store(root) as store:
        (doc,) = store.catalog.documents()
        assert doc.status == "ingesting" and doc.writer_pid is None and 3 <= doc.pages_done < BIG_PAGES


def test_cli_error_is_one_line_without_langgraphs_task_note(monkeypatch, capsys):
    from docrefrag import cli

    def failing(args):
        e = ConnectionError("LLM endpoint http://127.0.0.1:9/v1 refused the connection")
        e.add_note("During task with name 'validate' and id '98d64212'")  # LangGraph's, internal
        e.add_note("(run id 5532: its checkpoint is kept)")  # ours, for the user
        raise e

    monkeypatch.setitem(cli.COMMANDS, "docs", failing)
    assert cli.main(["docs"]) == cli.EXIT_ERROR
    assert capsys.readouterr().err == ("error: LLM endpoint http://127.0.0.1:9/v1 refused the connection "
                                       "(run id 5532: its checkpoint is kept)\n")

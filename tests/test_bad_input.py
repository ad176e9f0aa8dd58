"""Bad input: every broken item yields one line saying what was wrong and what to do, affects only
that item, and leaves the store consistent; the CLI exits 1 (some items failed) or 2 (nothing done)
without a traceback; a page that fails to parse is recorded as failed; an ingest killed with
SIGKILL resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pymupdf
import pytest
from conftest import REPO, subprocess_env
from docrefrag.core.chunking import retrieval_vectors
from docrefrag.core.synthetic import sample_report
from docrefrag.indexes import ingest as ingest_module
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.ingest import RETRIEVAL_K, Ingestor
from docrefrag.indexes.pages import DocSource, PageParser
from docrefrag.indexes.store import Store

# name in the bad-input folder -> a phrase of the remedy its message must carry
BAD = {
    "random.pdf": "repair or re-export",
    "truncated.pdf": "repair or re-export",
    "encrypted.pdf": "decrypt it first",
    "empty.pdf": "re-export or re-download",
    "notes.txt": "ingests PDF files and folders of page images",
    "report.docx": "ingests PDF files and folders of page images",
    "missing.pdf": "check the path",
    "nothing": "pass PDF files",
}
# items ingested with a warning: what is usable is kept, the message says what was wrong and what to do
DAMAGED = {
    "half.pdf": "re-export it",  # PyMuPDF repairs a PDF cut at 45% of its bytes; page 2 loses most words
    "scans": "re-export it as PNG or JPEG",  # page 2 of this page-image folder is not an image
}
# words that start an instruction; a message with none of them does not say what to do
REMEDY = re.compile(r"\b(check|re-?export|re-?download|repair|decrypt|convert|rename|add|put|pass|use|rerun)\b", re.I)


def _make_bad_inputs(folder: Path, light_pdf) -> list[Path]:
    """The good PDF and every bad item of BAD, in `folder`; returns the paths to ingest."""
    light_pdf(folder / "good.pdf", 2, tag="census")
    (folder / "random.pdf").write_bytes(random.Random(0).randbytes(4000))
    real = folder / "real.pdf"
    sample_report(real, pages=2, seed=0)
    data = real.read_bytes()
    real.unlink()
    # cut at 30% PyMuPDF gives up; cut at 45% it repairs the file and finds both pages (the report's
    # bytes are the same on every run: cut at exactly 50% it gives up too)
    (folder / "truncated.pdf").write_bytes(data[: int(len(data) * 0.3)])
    (folder / "half.pdf").write_bytes(data[: int(len(data) * 0.45)])
    with pymupdf.open(folder / "good.pdf") as doc:
        doc.save(folder / "encrypted.pdf", encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="x", owner_pw="y")
    (folder / "empty.pdf").write_bytes(b"")
    (folder / "notes.txt").write_text("not a document\n")
    (folder / "report.docx").write_bytes(b"PK\x03\x04" + bytes(60))
    (folder / "nothing").mkdir()
    (folder / "nothing" / "readme.txt").write_text("no pages here\n")
    scans = folder / "scans"  # page 1 is a real render, page 2 is not an image at all
    scans.mkdir()
    with pymupdf.open(folder / "good.pdf") as doc:
        doc[0].get_pixmap(dpi=72).save(scans / "page_1.png")
    (scans / "page_2.png").write_bytes(b"this is not a PNG file")
    return [folder / "good.pdf", *(folder / name for name in [*BAD, *DAMAGED])]


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory, ingest, light_pdf):
    """One ingest call over the good PDF and every bad item: (store, {name: result})."""
    folder = tmp_path_factory.mktemp("bad")
    paths = _make_bad_inputs(folder, light_pdf)
    with Store(folder / "store", create=True) as store:
        results = ingest(store, *paths)
        assert len(results) == len(paths)
        yield store, {Path(r.source).name: r for r in results}


def test_good_pdf_is_added_next_to_bad_inputs(bad_run, embedder):
    store, results = bad_run
    good = results["good.pdf"]
    assert (good.status, good.pages, good.failed_pages, good.message) == ("added", 2, 0, "")
    assert good.doc_id in store.ready_ids()
    hits = HybridSearcher(store, embedder).search("census station s002", k=2)
    assert [(h.doc_id, h.page) for h in hits][0] == (good.doc_id, 2)


@pytest.mark.parametrize("name", list(BAD))
def test_bad_item_fails_with_one_line_naming_it(bad_run, name):
    _, results = bad_run
    result = results[name]
    assert result.status == "failed", result
    assert result.doc_id is None and result.pages == 0
    assert result.message and "\n" not in result.message
    assert name in result.message


@pytest.mark.parametrize("name", list(BAD))
def test_bad_item_message_says_what_to_do(bad_run, name):
    message = bad_run[1][name].message
    assert REMEDY.search(message) and BAD[name] in message, message


@pytest.mark.parametrize("name", list(DAMAGED))
def test_damaged_item_keeps_what_is_usable_and_says_what_to_do(bad_run, name):
    store, results = bad_run
    result = results[name]
    assert result.status == "added" and result.doc_id in store.ready_ids(), result
    assert result.message and "\n" not in result.message and DAMAGED[name] in result.message
    if name == "scans":  # the bad page is named and recorded as failed; page 1 is searchable
        assert "page_2.png" in result.message and result.failed_pages == 1
        assert store.page(result.doc_id, 1).error is None and store.page(result.doc_id, 2).error is not None
    else:
        assert "repaired" in result.message


def test_failed_page_is_retried_by_the_next_ingest(tmp_path, ingest, light_pdf):
    scans = tmp_path / "scans"
    scans.mkdir()
    light_pdf(tmp_path / "src.pdf", 2, tag="retry")
    with pymupdf.open(tmp_path / "src.pdf") as doc:
        doc[0].get_pixmap(dpi=72).save(scans / "page_1.png")
        (scans / "page_2.png").write_bytes(b"not yet a PNG")
        with Store(tmp_path / "store", create=True) as store:
            first = ingest(store, scans)[0]
            assert first.failed_pages == 1
            # the same bytes again: still failing, still reported
            again = ingest(store, scans)[0]
            assert again.status == "resumed" and again.failed_pages == 1
            doc[1].get_pixmap(dpi=72).save(scans / "page_2.png")  # fixed: new content, a new version
            fixed = ingest(store, scans)[0]
            assert fixed.status == "replaced" and fixed.failed_pages == 0 and fixed.message == ""
            assert store.ready_ids() == [fixed.doc_id]


def test_bad_inputs_leave_the_store_consistent(bad_run, check_consistent):
    store, results = bad_run
    check_consistent(store)
    expected = {results[n].doc_id for n in ("good.pdf", *DAMAGED)}
    assert set(store.ready_ids()) == expected
    assert {k[0] for k in store.bm25().page_keys} == expected


def test_pdf_with_zero_pages(tmp_path, ingest):
    # PyMuPDF refuses to save a document without pages, so write the smallest such PDF by hand
    zero = tmp_path / "zero.pdf"
    zero.write_bytes(b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
                     b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n")
    with Store(tmp_path / "store", create=True) as store:
        (result,) = ingest(store, zero)
        assert result.status == "failed" and "zero.pdf" in result.message and "has no pages" in result.message
        assert REMEDY.search(result.message) and store.documents() == []


# ---------------------------------------------------------------------- the CLI


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


# ---------------------------------------------------------------------- a page that fails to parse

FAIL_INDEX = 1  # 0-based: page 2


@pytest.fixture
def failing_page(monkeypatch):
    """PageParser raises on page index FAIL_INDEX of every PDF (in this process)."""
    original = PageParser._parse_pdf_page

    def parse(self, index):
        if index == FAIL_INDEX:
            raise RuntimeError("simulated broken content stream")
        return original(self, index)

    monkeypatch.setattr(PageParser, "_parse_pdf_page", parse)


def _assert_failed_page_recorded(store: Store, doc_id: str, check_consistent) -> None:
    (doc,) = store.documents()
    assert (doc.status, doc.n_pages, doc.pages_done, doc.failed_pages) == ("ready", 3, 3, 1)
    broken = store.page(doc_id, 2)
    assert broken.error and "page 2" in broken.error and "simulated broken content stream" in broken.error
    assert "\n" not in broken.error and broken.words == []
    for n in (1, 3):
        page = store.page(doc_id, n)
        assert page.error is None and f"station s{n:03d}" in " ".join(w.text for w in page.words)
    assert store.visual.doc_pages(doc_id) == {1, 3}
    assert sorted(k[1] for k in store.bm25().page_keys) == [1, 3]
    check_consistent(store)


def test_parser_records_a_page_that_fails(tmp_path, store, encoder, light_pdf, failing_page, check_consistent):
    pdf = light_pdf(tmp_path / "three.pdf", 3)
    parser = PageParser(DocSource("pdf", pdf))
    try:
        parsed = [parser.parse(i) for i in range(3)]
    finally:
        parser.close()
    broken = parsed[FAIL_INDEX]
    assert broken.page == 2 and broken.words == [] and broken.chunks == [] and broken.render_jpeg == b""
    assert broken.error.startswith("page 2 could not be parsed (simulated broken content stream)")
    assert "rerun the ingest" in broken.error
    assert all(p.error is None and p.words for i, p in enumerate(parsed) if i != FAIL_INDEX)

    doc_id = "f" * 16  # what Ingestor._commit does for each page, by hand
    store.check_encoder(encoder.encoder_id, encoder.text_dim)
    store.begin_document(doc_id, pdf.name, str(pdf), "pdf", 3, pdf.stat().st_size)
    for page in parsed:
        tokens = encoder.encode(page.to_input()) if page.error is None else None
        if tokens is not None:
            pooled, vectors, _ = retrieval_vectors(tokens.tokens, tokens.word_counts, encoder.text_dim, RETRIEVAL_K)
            store.visual.upsert_page(doc_id, page.page, pooled, vectors)
        store.add_page(doc_id, page, tokens)
    store.finish_document(doc_id)
    _assert_failed_page_recorded(store, doc_id, check_consistent)


def test_ingest_records_a_page_that_fails(tmp_path, store, encoder, light_pdf, failing_page, monkeypatch,
                                          check_consistent):
    pdf = light_pdf(tmp_path / "three.pdf", 3)
    # the worker side (parser and encoder globals of indexes.ingest), run here in a thread, where the
    # monkeypatch applies; a process worker would import the unpatched PageParser
    monkeypatch.setattr(ingest_module, "_parser", None)
    monkeypatch.setattr(ingest_module, "_encoder", encoder)
    with Ingestor(store, workers=1, show_progress=False) as ingestor:
        ingestor._pool = ThreadPoolExecutor(1)
        (result,) = ingestor.ingest([pdf])
    assert (result.status, result.pages, result.failed_pages) == ("added", 3, 1)
    _assert_failed_page_recorded(store, result.doc_id, check_consistent)


# ---------------------------------------------------------------------- kill -9 during ingest

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
            running = {d.name: d.writer_pid for d in store.documents()}
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
        (partial,) = [d for d in store.documents() if d.name == "big.pdf"]
        check_consistent(store)
        searcher = HybridSearcher(store, embedder)
        hits = searcher.search("station s001 s002 s003 spring survey", k=10)
        assert hits and {h.doc_id for h in hits} == {ready.doc_id}
        assert searcher.search("station s001", k=5, doc_ids=[partial.doc_id]) == []
        assert not any(k[0] == partial.doc_id for k in store.bm25().page_keys)
        with pytest.raises(StoreError, match=r"'big.pdf' is only partly ingested \(big.pdf: \d+/40 pages\); rerun"):
            store.resolve("big.pdf")

    rerun = subprocess.run(command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert "Traceback" not in rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, rerun.stderr
    assert _one_line(rerun.stdout).startswith(f"resumed    {partial.doc_id}  {BIG_PAGES} pages")

    assert counts(root, partial.doc_id) == {"documents": 1, "pages": BIG_PAGES, "chunks": BIG_PAGES,
                                            "tokens": BIG_PAGES}
    with Store(root) as store:
        doc = store.find(partial.doc_id)
        assert (doc.status, doc.pages_done, doc.failed_pages) == ("ready", BIG_PAGES, 0)
        assert store.db.execute("SELECT COUNT(DISTINCT page), MIN(page), MAX(page) FROM pages WHERE doc_id = ?",
                                (partial.doc_id,)).fetchone() == (BIG_PAGES, 1, BIG_PAGES)
        assert store.visual.doc_pages(partial.doc_id) == set(range(1, BIG_PAGES + 1))
        assert store.visual.count() == BIG_PAGES + 2
        assert len(store.bm25().scope([partial.doc_id])) == BIG_PAGES
        check_consistent(store)
        hits = HybridSearcher(store, embedder).search("station s017", k=1, doc_ids=[partial.doc_id])
        assert [(h.doc_id, h.page) for h in hits] == [(partial.doc_id, 17)]


@pytest.mark.parametrize("group", [True, False], ids=["ctrl-c", "sigint-to-the-cli"])
def test_an_interrupted_ingest_says_one_line_and_leaks_nothing(tmp_path, light_pdf, group):
    root = tmp_path / "store"
    big = light_pdf(tmp_path / "big.pdf", BIG_PAGES)
    command = [sys.executable, "-m", "docrefrag", "ingest", str(big), "--store", str(root), "--workers", "2"]
    log = tmp_path / "interrupted.stderr"
    with log.open("w") as stderr:  # the workers and multiprocessing's resource tracker write here too
        proc = subprocess.Popen(command, cwd=REPO, env=subprocess_env(), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=stderr)
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
        (doc,) = store.documents()
        assert doc.status == "ingesting" and doc.writer_pid is None and 3 <= doc.pages_done < BIG_PAGES


# ---------------------------------------------------------------------- worker crashes and folder scans


def crash_on_marker_encoder():
    """An encoder factory for worker processes: the worker dies (as on a segfault) on a page that
    contains the word CRASHME."""
    from docrefrag.core.page_encoder import default_encoder

    encoder = default_encoder()
    encode = encoder.encode

    def encode_or_die(page):
        if any(w.text == "CRASHME" for w in page.words):
            os._exit(1)
        return encode(page)

    encoder.encode = encode_or_die
    return encoder


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_crash_fails_only_its_pages(tmp_path, light_pdf, workers):
    bad = light_pdf(tmp_path / "bad.pdf", 4, tag="crash")
    with pymupdf.open(bad) as doc:
        doc[1].insert_text((50, 700), "CRASHME", fontsize=12)
        doc.saveIncr()
    good = light_pdf(tmp_path / "good.pdf", 2, tag="fine")
    with Store(tmp_path / "store", create=True) as store, \
            Ingestor(store, crash_on_marker_encoder, workers=workers, show_progress=False) as ingestor:
        results = {Path(r.source).name: r for r in ingestor.ingest([bad, good])}
        crashed, fine = results["bad.pdf"], results["good.pdf"]
        assert crashed.status == "added" and crashed.doc_id in store.ready_ids()
        assert store.page(crashed.doc_id, 2).error.startswith("page 2 crashed its worker process")
        assert all(store.page(crashed.doc_id, n).error is None for n in (1, 3, 4)) and crashed.failed_pages == 1
        assert "rerun the ingest" in crashed.message
        assert (fine.status, fine.failed_pages) == ("added", 0)


def test_images_next_to_pdfs_are_not_a_document_and_a_bad_image_folder_fails_alone(tmp_path, ingest, light_pdf):
    root = tmp_path / "reports"
    (root / "assets").mkdir(parents=True)
    light_pdf(root / "annual.pdf", 1, tag="annual")
    with pymupdf.open(root / "annual.pdf") as doc:
        doc[0].get_pixmap(dpi=36).save(root / "logo.png")  # a figure beside the PDFs, not a page
        doc[0].get_pixmap(dpi=36).save(root / "assets" / "cover.png")  # no page number in the name
    with Store(tmp_path / "store", create=True) as store:
        results = {Path(r.source).name: r for r in ingest(store, root)}
        assert results["annual.pdf"].status == "added"
        assert results["assets"].status == "failed" and "page number" in results["assets"].message
        assert [d.name for d in store.documents()] == ["annual.pdf"]


def test_an_unreadable_file_fails_alone(tmp_path, ingest, light_pdf, monkeypatch):
    """The system refuses to read one file (permissions; as root chmod cannot show it, so the read
    fails by hand): that file fails with one line, the next one is still ingested."""
    light_pdf(tmp_path / "locked.pdf", 1, tag="locked")
    light_pdf(tmp_path / "open.pdf", 1, tag="open")
    real_hash = ingest_module.content_hash

    def refuse_locked(source):
        if source.path.name == "locked.pdf":
            raise PermissionError(13, "Permission denied", str(source.path))
        return real_hash(source)

    monkeypatch.setattr(ingest_module, "content_hash", refuse_locked)
    with Store(tmp_path / "store", create=True) as store:
        results = {Path(r.source).name: r for r in ingest(store, tmp_path / "locked.pdf", tmp_path / "open.pdf")}
        assert results["locked.pdf"].status == "failed"
        assert "Permission denied" in results["locked.pdf"].message and REMEDY.search(results["locked.pdf"].message)
        assert results["open.pdf"].status == "added"
        assert [d.name for d in store.documents()] == ["open.pdf"]


def test_a_symlink_loop_in_a_folder_is_scanned_once(tmp_path, ingest, light_pdf):
    root = tmp_path / "reports"
    (root / "sub").mkdir(parents=True)
    light_pdf(root / "a.pdf", 1, tag="alpha")
    light_pdf(root / "sub" / "b.pdf", 1, tag="beta")
    (root / "sub" / "up").symlink_to(root, target_is_directory=True)  # reports/sub/up -> reports
    sources, errors = ingest_module.discover([root])
    assert sorted(s.path.name for s in sources) == ["a.pdf", "b.pdf"] and errors == []


def test_api_ingest_takes_one_path_as_well_as_several(tmp_path):
    from docrefrag import DocRefrag

    missing = tmp_path / "missing.pdf"
    with DocRefrag(store=tmp_path / "store") as api:
        for one in (str(missing), missing):
            (result,) = api.ingest(one)  # a lone path, not an iterable of its characters
            assert result.status == "failed" and "check the path" in result.message
    assert not (tmp_path / "store").exists()  # nothing to ingest: no store is created


def test_a_store_path_that_is_a_file_or_a_damaged_catalog_is_one_clear_error(tmp_path):
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF-1.4 not a store")
    with pytest.raises(StoreError, match="is a file, not a store folder"):
        Store(report, create=True)
    assert report.read_bytes() == b"%PDF-1.4 not a store"
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "catalog.sqlite").write_bytes(random.Random(2).randbytes(4096))
    with pytest.raises(StoreError, match=r"catalog .*catalog.sqlite is damaged .*ingest the documents into a new store"):
        Store(tmp_path / "store")


def test_a_store_whose_visual_index_was_deleted_is_refused(tmp_path, ingest, light_pdf):
    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1, tag="census"))
    shutil.rmtree(tmp_path / "store" / "visual")
    with pytest.raises(StoreError, match=r"visual index .*visual is missing"):
        Store(tmp_path / "store")


def no_encoder():
    """An encoder factory for worker processes whose weights are missing."""
    raise FileNotFoundError("no cached weights for all-MiniLM-L6-v2; run `docrefrag models fetch`")


def test_an_ingest_that_fails_before_its_first_page_lists_no_partial_document(tmp_path, light_pdf):
    pdf = light_pdf(tmp_path / "survey.pdf", 2)
    with Store(tmp_path / "store", create=True) as store, \
            Ingestor(store, no_encoder, workers=1, show_progress=False) as ingestor:
        with pytest.raises(Exception, match="models fetch"):
            ingestor.ingest([pdf])
        assert store.documents() == []  # nothing to resume, so nothing listed as partly ingested
    with pytest.raises(ValueError, match="workers must be >= 1"):
        Ingestor(None, workers=-2)


def test_negative_workers_are_refused_before_a_store_is_created(tmp_path, light_pdf):
    from docrefrag import DocRefrag

    with DocRefrag(store=tmp_path / "store") as api, pytest.raises(ValueError, match="workers must be >= 1"):
        api.ingest(light_pdf(tmp_path / "survey.pdf", 1), workers=-2)
    assert not (tmp_path / "store").exists()


def test_a_store_whose_pages_all_failed_can_still_be_bound_to_a_qdrant_server(tmp_path):
    with Store(tmp_path / "store", create=True) as store:  # a first ingest whose only page failed: no vectors
        store.begin_document("d1", "scan.pdf", "/x/scan.pdf", "pdf", 1, 10)
    with Store(tmp_path / "store", qdrant_url="http://127.0.0.1:6333") as store:
        assert store.qdrant_url == "http://127.0.0.1:6333"  # no embedded vectors stand in the way


def test_a_new_store_is_not_bound_to_a_qdrant_server_that_did_not_answer(tmp_path):
    from docrefrag.indexes.visual import QdrantUnavailableError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with Store(tmp_path / "store", qdrant_url=dead, create=True) as store:
        with pytest.raises(QdrantUnavailableError, match="cannot reach the Qdrant server"):
            store.visual  # noqa: B018
    with Store(tmp_path / "store") as store:
        assert store.qdrant_url is None  # the next ingest uses the embedded index (or another URL)


def test_a_store_of_another_page_encoder_is_refused_for_search_and_ask(tmp_path, ingest, light_pdf):
    from docrefrag import DocRefrag

    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1, tag="census"))
        with store.db:  # as if an older docrefrag, with another encoder, had built it
            store.db.execute("UPDATE meta SET value = 'layoutgrid-old' WHERE key = 'encoder_id'")
    with DocRefrag(store=tmp_path / "store") as api:
        with pytest.raises(StoreError, match="holds tokens of encoder 'layoutgrid-old'.*new --store"):
            api.search("census")
        with pytest.raises(StoreError, match="holds tokens of encoder 'layoutgrid-old'"):
            api.ask("How many otters?", llm="builtins:dict")


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


def test_a_store_being_ingested_is_refused_before_any_model_loads(tmp_path, ingest, light_pdf):
    from docrefrag.indexes.writer import IngestLock

    from docrefrag import DocRefrag

    root = tmp_path / "store"
    with Store(root, create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1))
    busy = rf"busy: an ingest \(PID {os.getpid()}\) is writing it; retry when that process has finished"
    with Store(root) as writer, IngestLock(root) as lock:  # what a running ingest holds
        lock.writing("d" * 16)
        writer.visual  # noqa: B018
        with DocRefrag(store=root) as api:
            with pytest.raises(StoreError, match=busy):
                api.ask("How many herons were counted?")
            with pytest.raises(StoreError, match="--qdrant-url URL on the command line"):
                api.search("herons")
            assert api._embedder is None and api._llm is None and not api._readers  # no model was loaded
        with Store(root) as other, pytest.raises(StoreError, match=rf"another ingest \(PID {os.getpid()}\) is writing"):
            ingest(other, light_pdf(tmp_path / "other.pdf", 1, tag="census"))


def test_an_empty_query_is_refused_before_the_store_or_a_model(tmp_path, capsys):
    from docrefrag import DocRefrag

    with DocRefrag(store=tmp_path / "none") as api:
        with pytest.raises(ValueError, match="the query is empty"):
            api.search("  ")
        with pytest.raises(ValueError, match="the question is empty"):
            api.ask("")
        assert api._embedder is None and api._store is None
    from docrefrag.cli import main

    assert main(["ask", " ", "--store", str(tmp_path / "none")]) == 2  # refused before the (missing) store
    assert "the question is empty" in capsys.readouterr().err

"""Bad items in an ingest: every broken item yields one line saying what was wrong and what to do,
affects only that item, and leaves the store consistent; a damaged item keeps what is usable; images
beside PDFs, an unreadable file and a symlink loop in a folder scan.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pymupdf
import pytest

from docrefrag.core.synthetic_report import sample_report
from docrefrag.indexes import ingest as ingest_module
from docrefrag.indexes.hybrid import HybridSearcher
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
    assert good.doc_id in store.catalog.ready_ids()
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
    assert result.status == "added" and result.doc_id in store.catalog.ready_ids(), result
    assert result.message and "\n" not in result.message and DAMAGED[name] in result.message
    if name == "scans":  # the bad page is named and recorded as failed; page 1 is searchable
        assert "page_2.png" in result.message and result.failed_pages == 1
        assert store.pages.get(result.doc_id, 1).error is None and store.pages.get(result.doc_id, 2).error is not None
    else:
        assert "repaired" in result.message


def test_bad_inputs_leave_the_store_consistent(bad_run, check_consistent):
    store, results = bad_run
    check_consistent(store)
    expected = {results[n].doc_id for n in ("good.pdf", *DAMAGED)}
    assert set(store.catalog.ready_ids()) == expected
    assert {k[0] for k in store.bm25.index().page_keys} == expected


def test_pdf_with_zero_pages(tmp_path, ingest):
    # PyMuPDF refuses to save a document without pages, so write the smallest such PDF by hand
    zero = tmp_path / "zero.pdf"
    zero.write_bytes(b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
                     b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n")
    with Store(tmp_path / "store", create=True) as store:
        (result,) = ingest(store, zero)
        assert result.status == "failed" and "zero.pdf" in result.message and "has no pages" in result.message
        assert REMEDY.search(result.message) and store.catalog.documents() == []


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
        assert [d.name for d in store.catalog.documents()] == ["annual.pdf"]


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
        assert [d.name for d in store.catalog.documents()] == ["open.pdf"]


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

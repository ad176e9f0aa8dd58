"""Ingestion into a store on generated documents, with the real MiniLM and RapidOCR: pages, tokens,
renders, chunks and vectors; unchanged and replaced files; folders of page images; OCR of a PDF
page without a text layer; hybrid search over the result.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pymupdf
import pytest

from docrefrag.core.synthetic_report import sample_report
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

REPORT_PAGES = 6


@pytest.fixture(scope="module")
def annual(tmp_path_factory, ingest):
    """A 6-page sample report ingested into a fresh store: (store, facts, results, pdf path)."""
    root = tmp_path_factory.mktemp("report")
    pdf = root / "annual.pdf"
    facts = sample_report(pdf, pages=REPORT_PAGES, seed=0)
    with Store(root / "store", create=True) as store:
        results = ingest(store, pdf)
        yield store, facts, results, pdf


def test_report_ingests_every_page(annual, encoder, counts, check_consistent):
    store, _, results, pdf = annual
    (result,) = results
    assert (result.status, result.pages, result.ocr_pages, result.failed_pages) == ("added", REPORT_PAGES, 0, 0)
    assert result.source == str(pdf.resolve()) and result.message == ""

    (doc,) = store.catalog.documents()
    assert (doc.doc_id, doc.name, doc.status, doc.n_pages, doc.pages_done) == (
        result.doc_id, "annual.pdf", "ready", REPORT_PAGES, REPORT_PAGES)
    assert store.catalog.ready_ids() == [doc.doc_id]
    pages = range(1, REPORT_PAGES + 1)  # 1-based everywhere
    for n in pages:
        page = store.pages.get(doc.doc_id, n)
        assert page.error is None and not page.ocr
        assert (page.width, page.height) == (595.0, 842.0)
        assert len(page.words) > 50 and f"page {n}" in " ".join(w.text for w in page.words)
        tokens = store.pages.tokens(doc.doc_id, n)
        assert tokens.tokens.shape == (324, encoder.dim) and tokens.tokens.dtype == np.float32
        assert tokens.word_counts.shape == (324,) and tokens.word_counts.sum() == len(page.words)
        assert store.pages.render_path(doc.doc_id, n).read_bytes()[:2] == b"\xff\xd8"  # a JPEG
        assert store.pages.chunk(doc.doc_id, n, 0).text
    rows = counts(store.root, doc.doc_id)
    assert (rows["documents"], rows["pages"], rows["tokens"]) == (1, REPORT_PAGES, REPORT_PAGES)
    assert rows["chunks"] >= REPORT_PAGES
    assert store.visual.doc_pages(doc.doc_id) == set(pages)
    assert set(store.bm25.index().page_keys) == {(doc.doc_id, n) for n in pages}
    check_consistent(store)


def test_search_ranks_the_facts_page_first(annual, embedder):
    store, facts, _, _ = annual
    searcher = HybridSearcher(store, embedder)
    for fact in facts:
        hits = searcher.search(fact.question, k=3)
        assert all(1 <= h.page <= REPORT_PAGES for h in hits)
        assert len({h.page for h in hits}) == len(hits) == 3
        if fact.kind in ("text", "table"):
            assert hits[0].page == fact.page, (fact, hits)
            assert hits[0].sparse is not None and hits[0].dense is not None
            assert hits[0].snippet and hits[0].bbox is not None


def test_unchanged_file_is_not_ingested_again(annual, ingest, counts):
    store, _, (first,), pdf = annual
    before = counts(store.root, first.doc_id)
    (again,) = ingest(store, pdf)
    assert (again.status, again.doc_id, again.pages) == ("unchanged", first.doc_id, REPORT_PAGES)
    assert counts(store.root, first.doc_id) == before
    assert store.visual.count() == REPORT_PAGES
    assert len(store.bm25.index()) == REPORT_PAGES


def test_changed_file_replaces_its_old_version(tmp_path, store, ingest, counts, check_consistent):
    pdf = tmp_path / "report.pdf"
    sample_report(pdf, pages=3, seed=1)
    (old,) = ingest(store, pdf)
    assert old.status == "added"
    assert store.pages.render_path(old.doc_id, 1).is_file()

    sample_report(pdf, pages=3, seed=2)  # same path, new content
    (new,) = ingest(store, pdf)
    assert new.status == "replaced" and new.doc_id != old.doc_id and new.pages == 3

    assert [(d.doc_id, d.status) for d in store.catalog.documents()] == [(new.doc_id, "ready")]
    assert counts(store.root, old.doc_id) == {"documents": 0, "pages": 0, "chunks": 0, "tokens": 0}
    assert store.visual.doc_pages(old.doc_id) == set()
    assert not (store.root / "renders" / old.doc_id).exists()
    assert store.db.execute("SELECT COUNT(*) FROM tombstones").fetchone()[0] == 0
    assert store.visual.doc_pages(new.doc_id) == {1, 2, 3}
    assert store.visual.count() == 3
    assert {k[0] for k in store.bm25.index().page_keys} == {new.doc_id}
    check_consistent(store)


def test_a_moved_file_is_followed_and_its_next_edit_replaces_it(tmp_path, store, ingest, check_consistent):
    draft = tmp_path / "draft" / "report.pdf"
    draft.parent.mkdir()
    sample_report(draft, pages=2, seed=1)
    (old,) = ingest(store, draft)
    final = tmp_path / "final" / "report.pdf"
    final.parent.mkdir()
    draft.rename(final)
    (moved,) = ingest(store, final)
    assert (moved.status, moved.doc_id) == ("unchanged", old.doc_id) and f"moved here from {draft}" in moved.message
    assert [d.source for d in store.catalog.documents()] == [str(final)]

    sample_report(final, pages=2, seed=2)  # edited where it now lies
    (new,) = ingest(store, final)
    assert new.status == "replaced" and [d.doc_id for d in store.catalog.documents()] == [new.doc_id]
    check_consistent(store)


def _render_pages(pdf: Path, folder: Path, numbers: list[int]) -> None:
    """Render page i of `pdf` to folder/page_{numbers[i]}.png at 144 dpi."""
    folder.mkdir(parents=True, exist_ok=True)
    with pymupdf.open(pdf) as doc:
        for page, number in zip(doc, numbers, strict=False):
            page.get_pixmap(dpi=144).save(folder / f"page_{number}.png")


def _word_pdf(path: Path, words: list[str]) -> Path:
    """Small pages (300 x 200 pt), page i headed by words[i] in large type (easy for OCR)."""
    doc = pymupdf.open()
    for word in words:
        page = doc.new_page(width=300, height=200)
        page.insert_text((20, 60), f"{word} crossing river", fontsize=24)
        page.insert_text((20, 120), "number seven harbour", fontsize=18)
    doc.save(path)
    doc.close()
    return path


def _texts(store: Store, doc_id: str, page: int) -> set[str]:
    return {w.text.lower() for w in store.pages.get(doc_id, page).words}


def test_folder_of_page_images_is_one_ocr_document(tmp_path, store, ingest, check_consistent):
    pdf = _word_pdf(tmp_path / "words.pdf", ["Zebra", "Falcon", "Walrus"])
    scans = tmp_path / "scans"
    _render_pages(pdf, scans, [1, 2, 10])  # page_10 sorts after page_2 by number, not by name
    (result,) = ingest(store, scans)
    assert (result.status, result.pages, result.ocr_pages, result.failed_pages) == ("added", 3, 3, 0)
    (doc,) = store.catalog.documents()
    assert (doc.kind, doc.name, doc.ocr_pages, doc.status) == ("images", "scans", 3, "ready")
    for page, word in enumerate(["zebra", "falcon", "walrus"], start=1):
        assert word in _texts(store, doc.doc_id, page)
        record = store.pages.get(doc.doc_id, page)
        assert record.ocr and (record.width, record.height) == pytest.approx((300.0, 200.0))
    check_consistent(store)
    from docrefrag.agents.answer import outline_page
    assert outline_page(store, doc.doc_id, "Which section?", 4000) is None  # a scan's headings are no outline


def test_folder_with_pdfs_and_a_subfolder_of_images_yields_both(tmp_path, store, ingest, light_pdf,
                                                                  check_consistent):
    folder = tmp_path / "inbox"
    light_pdf(folder / "survey.pdf", 2)
    _render_pages(_word_pdf(tmp_path / "words.pdf", ["Zebra", "Falcon"]), folder / "scans", [1, 2])
    results = ingest(store, folder)
    assert sorted((r.status, Path(r.source).name, r.pages, r.ocr_pages) for r in results) == [
        ("added", "scans", 2, 2), ("added", "survey.pdf", 2, 0)]
    assert sorted((d.kind, d.name, d.status) for d in store.catalog.documents()) == [
        ("images", "scans", "ready"), ("pdf", "survey.pdf", "ready")]
    check_consistent(store)


def test_pdf_page_without_text_layer_is_ocred(tmp_path, store, ingest, check_consistent):
    with pymupdf.open() as picture:  # a page of text, flattened into a pixmap
        page = picture.new_page(width=595, height=842)
        page.insert_text((50, 100), "Pelican harbour lighthouse evening", fontsize=28)
        pixmap = page.get_pixmap(dpi=144)
    pdf = tmp_path / "scan.pdf"
    with pymupdf.open() as doc:
        doc.new_page(width=595, height=842).insert_text(
            (50, 100), "This first page has an ordinary text layer with words", fontsize=12)
        scanned = doc.new_page(width=595, height=842)
        scanned.insert_image(scanned.rect, pixmap=pixmap)
        doc.save(pdf)
    assert pymupdf.open(pdf)[1].get_text().strip() == ""

    (result,) = ingest(store, pdf)
    assert (result.status, result.pages, result.ocr_pages, result.failed_pages) == ("added", 2, 1, 0)
    assert not store.pages.get(result.doc_id, 1).ocr
    scanned_page = store.pages.get(result.doc_id, 2)
    assert scanned_page.ocr and {"pelican", "lighthouse"} <= _texts(store, result.doc_id, 2)
    assert any(b.kind == "figure" for b in scanned_page.blocks)
    assert "pelican" in store.pages.chunk(result.doc_id, 2, 0).text.lower()
    check_consistent(store)


def test_a_missing_bm25_file_is_built_in_memory_and_rewritten_by_the_next_ingest(tmp_path, ingest, light_pdf):
    pdf = light_pdf(tmp_path / "notes.pdf", 2, tag="notes")
    with Store(tmp_path / "store", create=True) as store:
        ingest(store, pdf)
        assert store.bm25.saved()
        (tmp_path / "store" / "bm25.npz").unlink()
    with Store(tmp_path / "store") as store:  # a reader: builds in memory, writes nothing
        assert len(store.bm25.index()) == 2 and not store.bm25.saved()
        assert ingest(store, pdf)[0].status == "unchanged" and store.bm25.saved()

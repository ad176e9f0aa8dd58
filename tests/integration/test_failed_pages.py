"""A page that fails: one that fails to parse is recorded as failed (by the parser and through an
ingest) and retried by the next ingest once fixed; a worker process that dies fails only its pages;
an encoder that cannot load lists no partial document.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pymupdf
import pytest

from docrefrag.core.chunking import retrieval_vectors
from docrefrag.indexes import ingest as ingest_module
from docrefrag.indexes.ingest import Ingestor
from docrefrag.indexes.pages import DocSource, PageParser
from docrefrag.indexes.store import Store


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
            assert store.catalog.ready_ids() == [fixed.doc_id]


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
    (doc,) = store.catalog.documents()
    assert (doc.status, doc.n_pages, doc.pages_done, doc.failed_pages) == ("ready", 3, 3, 1)
    broken = store.pages.get(doc_id, 2)
    assert broken.error and "page 2" in broken.error and "simulated broken content stream" in broken.error
    assert "\n" not in broken.error and broken.words == []
    for n in (1, 3):
        page = store.pages.get(doc_id, n)
        assert page.error is None and f"station s{n:03d}" in " ".join(w.text for w in page.words)
    assert store.visual.doc_pages(doc_id) == {1, 3}
    assert sorted(k[1] for k in store.bm25.index().page_keys) == [1, 3]
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
    store.meta.check_encoder(encoder.encoder_id, encoder.text_dim)
    store.catalog.begin(doc_id, pdf.name, str(pdf), "pdf", 3, pdf.stat().st_size)
    for page in parsed:
        tokens = encoder.encode(page.to_input()) if page.error is None else None
        if tokens is not None:
            pooled, vectors, _ = retrieval_vectors(tokens.tokens, tokens.word_counts, encoder.text_dim)
            store.visual.upsert_page(doc_id, page.page, pooled, vectors)
        store.pages.add(doc_id, page, tokens)
    store.catalog.finish(doc_id)
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
        assert crashed.status == "added" and crashed.doc_id in store.catalog.ready_ids()
        assert store.pages.get(crashed.doc_id, 2).error.startswith("page 2 crashed its worker process")
        assert all(store.pages.get(crashed.doc_id, n).error is None for n in (1, 3, 4)) and crashed.failed_pages == 1
        assert "rerun the ingest" in crashed.message
        assert (fine.status, fine.failed_pages) == ("added", 0)


def no_encoder():
    """An encoder factory for worker processes whose weights are missing."""
    raise FileNotFoundError("no cached weights for all-MiniLM-L6-v2; run `docrefrag models fetch`")


def test_an_ingest_that_fails_before_its_first_page_lists_no_partial_document(tmp_path, light_pdf):
    pdf = light_pdf(tmp_path / "survey.pdf", 2)
    with Store(tmp_path / "store", create=True) as store, \
            Ingestor(store, no_encoder, workers=1, show_progress=False) as ingestor:
        with pytest.raises(Exception, match="models fetch"):
            ingestor.ingest([pdf])
        assert store.catalog.documents() == []  # nothing to resume, so nothing listed as partly ingested
    with pytest.raises(ValueError, match="workers must be >= 1"):
        Ingestor(None, workers=-2)

"""Stores that cannot be used, each refused with one clear error: a path that is a file, a damaged
catalog, a deleted visual index, an unreachable Qdrant server, another page encoder's tokens, an
ingest in progress; and requests refused before a store is created or a model loads.
"""

from __future__ import annotations

import os
import random
import shutil
import socket

import pytest

from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.store import Store


def test_a_store_path_that_is_a_file_or_a_damaged_catalog_is_one_clear_error(tmp_path):
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF-1.4 not a store")
    with pytest.raises(StoreError, match="is a file, not a store folder"):
        Store(report, create=True)
    assert report.read_bytes() == b"%PDF-1.4 not a store"
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "catalog.sqlite").write_bytes(random.Random(2).randbytes(4096))
    with pytest.raises(StoreError,
                       match=r"catalog .*catalog.sqlite is damaged .*ingest the documents into a new store"):
        Store(tmp_path / "store")


def test_a_store_whose_visual_index_was_deleted_is_refused(tmp_path, ingest, light_pdf):
    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1, tag="census"))
    shutil.rmtree(tmp_path / "store" / "visual")
    with pytest.raises(StoreError, match=r"visual index .*visual is missing"):
        Store(tmp_path / "store")


def test_negative_workers_are_refused_before_a_store_is_created(tmp_path, light_pdf):
    from docrefrag import DocRefrag

    with DocRefrag(store=tmp_path / "store") as api, pytest.raises(ValueError, match="workers must be >= 1"):
        api.ingest(light_pdf(tmp_path / "survey.pdf", 1), workers=-2)
    assert not (tmp_path / "store").exists()


def test_a_store_whose_pages_all_failed_can_still_be_bound_to_a_qdrant_server(tmp_path):
    with Store(tmp_path / "store", create=True) as store:  # a first ingest whose only page failed: no vectors
        store.catalog.begin("d1", "scan.pdf", "/x/scan.pdf", "pdf", 1, 10)
    with Store(tmp_path / "store", qdrant_url="http://127.0.0.1:6333") as store:
        assert store.qdrant_url == "http://127.0.0.1:6333"  # no embedded vectors stand in the way


def test_a_new_store_is_not_bound_to_a_qdrant_server_that_did_not_answer(tmp_path):
    from docrefrag.indexes.visual_backends import QdrantUnavailableError

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


def test_a_store_being_ingested_is_refused_before_any_model_loads(tmp_path, ingest, light_pdf):
    from docrefrag import DocRefrag
    from docrefrag.indexes.writer import IngestLock

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

"""The reader-baselines harness and reader reranking in the retrieval evaluation, with a tiny random
decoder behind the real stored page tokens: every pipeline reads the pages it names, scores with the
official rules, and a rerun resumes from the log."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_llama

from docrefrag.core.config import ReaderConfig
from docrefrag.core.reader import DocRefragReader
from docrefrag.evals.baselines import PIPELINES, evaluate_baselines, run_pipeline, summary_table
from docrefrag.evals.datasets import Question
from docrefrag.evals.retrieval import evaluate_retrieval
from docrefrag.indexes.hybrid import HybridSearcher


@pytest.fixture(scope="module")
def tiny_reader():
    from transformers import AutoTokenizer

    from docrefrag.core.weights import model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir("smollm2"), local_files_only=True)
    decoder = tiny_llama(tokenizer, seed=0).eval()
    config = ReaderConfig(hidden=32, projector_hidden=32, selector_dim=32, selector_ff=32, max_new_tokens=3)
    return DocRefragReader(decoder, tokenizer, config, lambda t: np.ones((len(t), 384), dtype=np.float32)).eval()


def test_every_pipeline_reads_its_pages_and_a_rerun_resumes(tmp_path, store, ingest, light_pdf, embedder, tiny_reader):
    (result,) = ingest(store, light_pdf(tmp_path / "survey.pdf", 24))
    q = Question("q1", "mmlongbench", "survey.pdf", "How many otters were counted near station s009?", "4",
                 "Int", (9,), ("Pure-text (Plain-text)",))
    searcher = HybridSearcher(store, embedder)
    assert len(run_pipeline("top-20 selective", q, result.doc_id, store, searcher, tiny_reader)) == 20
    reranked = run_pipeline("top-20 reranked to 5", q, result.doc_id, store, searcher, tiny_reader)
    top20 = run_pipeline("top-20 selective", q, result.doc_id, store, searcher, tiny_reader)
    assert len(reranked) == 5 and set(reranked) <= set(top20)
    out = tmp_path / "baselines.jsonl"
    (row,) = evaluate_baselines(store, searcher, tiny_reader, [q], {"survey.pdf": result.doc_id}, out,
                                show_progress=False)
    for name in PIPELINES:
        cell = row[name]
        assert cell["score"] in (0.0, 1.0) and cell["seconds"] > 0
        assert len(cell["pages"]) == (20 if name == "top-20 selective" else 5)
        assert cell["evidence_read"] == (9 in cell["pages"])
    assert row["sparse top-5"]["pages"][0] == 9  # "s009" is on page 9 only
    table = summary_table([row])
    assert table.count("\n") == 1 + len(PIPELINES)
    evaluate_baselines(store, searcher, tiny_reader, [q], {"survey.pdf": result.doc_id}, out, show_progress=False)
    assert len(out.read_text().splitlines()) == 1  # resumed: nothing recomputed


def test_retrieval_evaluation_adds_a_reranked_row(tmp_path, store, ingest, light_pdf, embedder):
    (result,) = ingest(store, light_pdf(tmp_path / "survey.pdf", 10))
    q = Question("q1", "mmlongbench", "survey.pdf", "station s004 otter count", "3", "Int", (4,), ())
    reverse = lambda question, pages: [float(-i) for i in range(len(pages))][::-1]  # noqa: E731 (reverses)
    report = evaluate_retrieval(store, HybridSearcher(store, embedder), [q], {"survey.pdf": result.doc_id},
                                tmp_path / "r.jsonl", show_progress=False, reranker=reverse)
    row = json.loads((tmp_path / "r.jsonl").read_text())
    assert row["reranked"]["ranked"] == row["consistency"]["ranked"][::-1] and len(row["reranked"]["ranked"]) == 10
    assert "reranked" in report.methods and report.latency_ms["rerank_ms_per_page_mean"] >= 0


def test_the_readers_citations_are_expanded_chunks(tmp_path, store, ingest, light_pdf, embedder, tiny_reader):
    from docrefrag.agents.answer import page_texts, read_with_reader
    from docrefrag.core.chunking import chunk_box

    (result,) = ingest(store, light_pdf(tmp_path / "survey.pdf", 3))
    hits = HybridSearcher(store, embedder).search("station s002 otter", k=3, doc_ids=[result.doc_id])
    pages = page_texts(store, [(h.doc_id, h.page) for h in hits], "station s002 otter", 1500)
    answer, tokens, cited = read_with_reader("How many otters near station s002?", pages, store, tiny_reader)
    assert answer and tokens >= 1
    grid_boxes = {chunk_box(j, 3, 18, 595, 842) for j in range(108)}
    assert cited and all(c.bbox in grid_boxes for p in cited for c in p.chunks)
    assert all(c.page == p.page and c.text for p in cited for c in p.chunks)

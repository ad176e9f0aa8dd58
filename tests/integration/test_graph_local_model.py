"""The ask graph with the real default local model: the right answer with its decoding progress
reported and its citation on the table that states it, the sample report's questions answered with the
defaults, and the chat reranker ordering the pages by a local model's relevance.
"""

from __future__ import annotations

import pytest
from conftest import ANSWER_PAGE, FILLER, PAGE_SIZE, QUESTION, entries, nodes_of, retrieved_pages

from docrefrag.graph.context import AskConfig


def test_ask_with_the_real_local_model(dr, report):
    from docrefrag.core.decoding import decoding_progress

    _, doc_id = report
    reports: list[tuple[int, int]] = []
    with decoding_progress(lambda read, written: reports.append((read, written))):  # as the CLI's progress line
        result = dr.ask(QUESTION, llm=None, config=AskConfig.of(answerer="chat", max_rounds=1))
    # the graph's nodes report every token loop: the answer's prompt (a page read), then each token written
    prefills = [read for read, written in reports if written == 0]
    assert prefills and max(prefills) > 150
    answer_loop = [w for r, w in reports if r == max(prefills)]
    assert answer_loop == list(range(len(answer_loop))) and len(answer_loop) > 1
    print(f"\nreal local model: answer {result.answer!r}, confidence {result.confidence}, "
          f"{result.seconds:.1f} s, {result.tokens} answer tokens, claims {result.claims}")
    assert result.answer == "4812" and result.supported  # 4,812 on the page, in the form the scorers take
    assert {c["page"] for claim in result.claims for c in claim["citations"]} == {ANSWER_PAGE}
    assert nodes_of(result.trace) in (["plan", "retrieve", "rerank", "answer", "validate"],  # the default HyDE mode:
                                      ["plan", "retrieve", "enrich", "retrieve", "rerank", "answer", "validate"])
    for claim in result.claims:
        for c in claim["citations"]:
            assert c["doc_id"] == doc_id and 1 <= c["page"] <= len(FILLER)
            if c["bbox"] is not None:
                x0, y0, x1, y1 = c["bbox"]
                assert 0 <= x0 < x1 <= PAGE_SIZE[0] and 0 <= y0 < y1 <= PAGE_SIZE[1]


@pytest.mark.slow
def test_the_defaults_answer_the_sample_reports_questions(tmp_path):
    """What `make demo` asks: the sample report's prose and table questions, with every default."""
    from docrefrag.api import DocRefrag
    from docrefrag.core.synthetic_report import sample_report
    from docrefrag.evals.answers import cited_region_text

    facts = sample_report(tmp_path / "sample-report.pdf", pages=12)
    with DocRefrag(store=tmp_path / "store") as dr:
        assert [r.status for r in dr.ingest([tmp_path / "sample-report.pdf"])] == ["added"]
        for fact in [f for f in facts if f.kind in ("text", "table")][:2]:
            result = dr.ask(fact.question)
            assert result.answer == fact.answer, (fact.question, result.answer, result.trace[-1])
            (claim,) = result.claims
            (citation,) = claim["citations"]
            assert citation["page"] == fact.page and fact.answer in cited_region_text(dr.open_store(), citation)


def test_chat_reranker_orders_the_pages_by_the_local_models_relevance(dr, report):
    from docrefrag.agents.llm import LocalChatModel
    from docrefrag.core.weights import model_dir

    _, doc_id = report
    local = LocalChatModel(path=model_dir("smollm2"), max_new_tokens=8)  # the smallest decoder: the ordering only
    config = AskConfig.of(answerer="chat", rerank=True, reranker="chat", hyde="never", max_rounds=1)
    assert not config.needs_reader
    result = dr.ask(QUESTION, llm=local, config=config)

    (retrieve,) = entries(result.trace, "retrieve")
    (rerank,) = entries(result.trace, "rerank")
    scores = [h["rerank"] for h in rerank["hits"]]
    assert sorted(retrieved_pages(rerank)) == sorted(retrieved_pages(retrieve))
    assert all(0 < s < 1 for s in scores) and scores == sorted(scores, reverse=True)
    (answer,) = entries(result.trace, "answer")
    read = [tuple(p) for p in answer["pages"]]  # in the reranked order, page by page until one answers
    assert read and read == [(doc_id, p) for p in retrieved_pages(rerank)[: len(read)]]

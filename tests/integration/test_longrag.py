"""Noisy page sequences on a small ingested corpus (two synthetic training documents and a 24-page
survey, 36 pages): hard negatives are the hybrid ranking's pages after the top 3 and never the
evidence; their count is in range; head and random placement; determinism by seed; an
MMLongBench-style question file with multi-page and unanswerable questions.
"""

from __future__ import annotations

import json

import pytest

from docrefrag.core.longrag import EvidenceQuestion, NoiseConfig, build_sequence, build_sequences
from docrefrag.core.synthetic_training import training_document
from docrefrag.evals.datasets import load_questions, mmlongbench_format
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

CORPUS_PAGES = 6 + 6 + 24


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, ingest, light_pdf, embedder):
    """(searcher, store, doc_id of a.pdf, its answerable questions)."""
    root = tmp_path_factory.mktemp("longrag")
    doc = training_document(root / "a.pdf", pages=6, seed=0)
    training_document(root / "b.pdf", pages=6, seed=1)
    light_pdf(root / "survey.pdf", 24)
    with Store(root / "store", create=True) as store:
        results = ingest(store, root / "a.pdf", root / "b.pdf", root / "survey.pdf")
        assert [r.status for r in results] == ["added"] * 3
        doc_id = next(r.doc_id for r in results if r.source.endswith("a.pdf"))
        questions = [EvidenceQuestion.from_fact(f, doc_id) for f in doc.questions if f.page]
        yield HybridSearcher(store, embedder), store, doc_id, questions


def _ranking(searcher: HybridSearcher, question: str) -> list[tuple[str, int]]:
    return [(h.doc_id, h.page) for h in searcher.search(question, k=CORPUS_PAGES)]


def test_negatives_follow_the_top_three_and_exclude_the_evidence(corpus):
    searcher, _, doc_id, questions = corpus
    seqs = build_sequences(searcher, questions)  # defaults: m in [20, 30], drop the top 3, evidence first
    counts = set()
    for q, seq in zip(questions, seqs, strict=True):
        (page,) = q.evidence_pages
        assert (seq.question, seq.answer, seq.answer_format) == (q.question, q.answer, q.answer_format)
        assert seq.placement == "head" and seq.evidence == [0] and seq.pages[0] == (doc_id, page)
        negatives = seq.pages[1:]
        assert 20 <= len(negatives) <= 30 and len(set(negatives)) == len(negatives)
        ranked = [key for key in _ranking(searcher, q.question) if key != (doc_id, page)]
        assert set(negatives) == set(ranked[3:3 + len(negatives)]), q.question
        assert not set(negatives) & set(ranked[:3])
        counts.add(len(negatives))
    assert len(counts) > 1  # m is drawn per question


def test_random_placement_moves_the_evidence_not_the_negatives(corpus):
    searcher, _, doc_id, questions = corpus
    head = build_sequences(searcher, questions)
    spread = build_sequences(searcher, questions, NoiseConfig(placement="random"))
    for q, h, r in zip(questions, head, spread, strict=False):
        assert r.placement == "random" and len(r.evidence) == 1
        assert r.pages[r.evidence[0]] == (doc_id, q.evidence_pages[0])
        assert sorted(r.pages) == sorted(h.pages)
    assert len({r.evidence[0] for r in spread}) > 2


def test_same_seed_same_sequences(corpus):
    searcher, _, _, questions = corpus
    config = NoiseConfig(m_min=5, m_max=12, placement="random", seed=3)
    first = build_sequences(searcher, questions, config)
    assert build_sequences(searcher, questions, config) == first
    assert build_sequences(searcher, questions[::-1], config) == first[::-1]  # independent of the other questions
    other = build_sequences(searcher, questions, NoiseConfig(m_min=5, m_max=12, placement="random", seed=4))
    assert other != first


def test_mmlongbench_question_file(corpus, tmp_path):
    """Multi-page evidence and an unanswerable question, read from a samples.json as in MMLongBench-Doc."""
    searcher, store, doc_id, _ = corpus
    samples = [
        {"doc_id": "survey.pdf", "question": "Which animals were counted at stations s004 and s005?",
         "answer": "['marten', 'osprey']", "evidence_pages": "[4, 5]", "evidence_sources": "['Pure-text (Plain-text)']",
         "answer_format": "List", "doc_type": "Research report"},
        {"doc_id": "a.pdf", "question": "How many lynx were counted at station s999?", "answer": "Not answerable",
         "evidence_pages": "[]", "evidence_sources": "[]", "answer_format": "None", "doc_type": "Research report"},
    ]
    (tmp_path / "samples.json").write_text(json.dumps(samples))
    questions = [EvidenceQuestion(q.question, q.answer, mmlongbench_format(q), store.catalog.resolve(q.doc_name),
                                  q.evidence_pages) for q in load_questions("mmlongbench", tmp_path)]
    config = NoiseConfig(m_min=4, m_max=6, placement="random", seed=1)
    multi, none = build_sequences(searcher, questions, config)
    survey = store.catalog.resolve("survey.pdf")
    assert [multi.pages[i] for i in multi.evidence] == [(survey, 4), (survey, 5)]
    assert multi.evidence == sorted(multi.evidence) and 4 + 2 <= len(multi.pages) <= 6 + 2
    ranked = [key for key in _ranking(searcher, questions[0].question) if key not in {(survey, 4), (survey, 5)}]
    negatives = [key for i, key in enumerate(multi.pages) if i not in multi.evidence]
    assert set(negatives) == set(ranked[3:3 + len(negatives)])
    assert none.evidence == [] and 4 <= len(none.pages) <= 6 and none.answer_format == "None"
    assert set(none.pages) == set(_ranking(searcher, questions[1].question)[3:3 + len(none.pages)])


def test_bad_input_is_refused(corpus):
    searcher, _, doc_id, questions = corpus
    q = questions[0]
    with pytest.raises(ValueError, match="not a ready document"):
        build_sequence(searcher, EvidenceQuestion(q.question, q.answer, q.answer_format, "nope", (1,)))
    with pytest.raises(ValueError, match=r"in 1\.\.6"):
        build_sequence(searcher, EvidenceQuestion(q.question, q.answer, q.answer_format, doc_id, (7,)))
    with pytest.raises(ValueError, match="ingest more documents or lower m_min/m_max"):
        build_sequence(searcher, q, NoiseConfig(m_min=40, m_max=40))
    with pytest.raises(ValueError, match="m_min <= m_max"):
        NoiseConfig(m_min=30, m_max=20)
    with pytest.raises(ValueError, match="placement"):
        NoiseConfig(placement="tail")

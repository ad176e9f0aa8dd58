"""GRPO's questions over real pages (`docrefrag train stage3 --grpo-data DIR --grpo-store STORE`).

A benchmark's answerable questions with one evidence page, whose evidence is no chart or figure and whose
gold answer that page's text states (`answers.answer_is_stated`): on such pages which chunks the selector
expands moves the decoder's probability of the answer, so the GRPO reward has something to follow (on
charts and counts it barely moves, docs/decisions/selector.md). Only the questions on the documents that
STORE holds are used: ingest training documents there, never the ones evaluated on. Each is read with its
evidence page and the best-ranked other page of its document (a hard negative), in rank order, as
`ask` ranks them; the questions are shuffled by the seed, so a run's `questions` cycle is a fixed draw.
"""

from __future__ import annotations

import random
from pathlib import Path

from docrefrag.core.page_encoder import default_encoder
from docrefrag.core.train_data import Example, PageQuestions
from docrefrag.evals.answers import answer_is_stated
from docrefrag.evals.datasets import Benchmark, Question, load_questions, mmlongbench_format
from docrefrag.evals.reader_evals import single_evidence_questions
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

VISUAL_SOURCES = {"Chart", "Figure"}  # evidence a text reading cannot hold
RANKED = 4  # pages ranked per question to find its hard negative


def stated_text_questions(store: Store, questions: list[Question]) -> list[tuple[Question, str]]:
    """(question, doc_id) for the answerable single-evidence-page questions on the store's ready documents
    (`reader_evals.single_evidence_questions`, all of them) whose evidence is no chart or figure and whose
    gold answer the evidence page's text states."""
    documents = store.catalog.documents()
    ids = {d.name: d.doc_id for d in documents}
    return [(q, ids[q.doc_name]) for q in single_evidence_questions(questions, documents, max(1, len(questions)))
            if not VISUAL_SOURCES & set(q.evidence_sources) and answer_is_stated(store, ids[q.doc_name], q)]


def grpo_questions(data: Path, store_dir: Path, benchmark: Benchmark = "mmlongbench", seed: int = 0) -> PageQuestions:
    """The stated text questions of `data`/samples.json on the documents of the store `store_dir`, each
    over its evidence page and its document's best-ranked other page, shuffled by `seed`."""
    with Store(store_dir) as store:
        chosen = stated_text_questions(store, load_questions(benchmark, Path(data) / "samples.json"))
        searcher = HybridSearcher(store, default_encoder().embedder)
        examples, tokens, records = [], {}, {}
        for q, doc_id in chosen:
            ranked = searcher.candidates(q.question, [doc_id], k=RANKED).ranked("consistency")[:RANKED]
            evidence = (doc_id, q.evidence_pages[0])
            negative = next((k for k in ranked if k != evidence), None)
            if negative is None:  # a one-page document has no other page
                continue
            pages = sorted([evidence, negative], key=lambda k: ranked.index(k) if k in ranked else len(ranked))
            for key in pages:
                tokens[key] = store.pages.tokens(*key).tokens
                records[key] = store.pages.get(*key)
            examples.append(Example("qa", q.question, pages, q.answer, mmlongbench_format(q)))
    if not examples:
        raise ValueError(f"none of the questions in {data} is a stated text question on a document of more than "
                         f"one page in {store_dir}: ingest the training documents of that set there first")
    random.Random(seed).shuffle(examples)
    return PageQuestions(examples, tokens, records,
                         f"{benchmark} stated text questions of {Path(data).resolve()} on the documents of "
                         f"{Path(store_dir).resolve()}, each with its best-ranked other page")

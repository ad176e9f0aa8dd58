"""The experience memory (graph/memory.py) on the generated report with scripted chat models: a
validated run stores its plan, once; a paraphrase recalls it (its sub-queries searched too, its pages
as hints) and an unrelated question does not; memory=False neither stores nor recalls; memory never
changes the citations; retiring a document removes the plans over it alone; `docrefrag memory
list|clear` and `ask --no-memory` on the command line.

The `--llm module:factory` model below is found by the CLI as an attribute of this module.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ANSWER_PAGE, NEW_QUERY, QUESTION, REPO, entries, nodes_of, scripted, subprocess_env
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

from docrefrag.graph.context import AskConfig
from docrefrag.graph.memory import SIMILARITY, recall

PARAPHRASE = "What number of passengers did Northfield report for 2019?"
UNRELATED = "What fare policy applied to the bus routes?"
CHAT = {"answerer": "chat", "hyde": "never"}


def heron_llm() -> GenericFakeChatModel:
    """An `--llm module:factory` model answering "heron" (on page 1 of light_pdf's survey) and judging it supported."""
    return scripted("heron", "Yes")[0]


def _refined_run(dr):
    """A run validated in its second round: its plan holds the refined query and the question."""
    llm, _ = scripted("Southport", "No", NEW_QUERY, "4,812", "Yes")
    return dr.ask(QUESTION, llm=llm, config=AskConfig.of(**CHAT, max_rounds=2))


def test_a_validated_run_stores_its_plan_once(dr, report):
    llm, _ = scripted("Southport", "No")  # not validated: nothing stored
    assert not dr.ask(QUESTION, llm=llm, config=AskConfig.of(**CHAT, max_rounds=1)).supported
    assert dr.plans() == []

    result = _refined_run(dr)
    assert result.supported and result.rounds == 2
    (plan,) = dr.plans()
    assert (plan.question, plan.doc_ids, plan.sub_queries) == (QUESTION, [report[1]], [NEW_QUERY, QUESTION])
    assert (plan.rounds, plan.confidence) == (2, result.confidence) and plan.confidence >= AskConfig().validation.tau
    assert plan.nodes == ["plan", "retrieve", "rerank", "answer", "validate", "refine"]
    assert plan.evidence["pages"] == [{"doc_id": report[1], "page": ANSWER_PAGE}]
    graph = dr.open_store().graphs.get(report[1])
    (section,) = plan.evidence["sections"]  # the heading above the cited table
    page, element = map(int, section["id"].split(":"))
    assert page == ANSWER_PAGE and graph.nodes[(page, element)].kind == "heading"
    assert section == {"doc_id": report[1], "id": section["id"], "text": "Regional transit review, part D"}
    assert 0 < plan.created_at and nodes_of(result.trace).count("memory") == 0  # nothing stored before it


def test_a_paraphrase_recalls_the_plan_and_an_unrelated_question_does_not(dr, report):
    _refined_run(dr)
    (stored,) = dr.plans()
    llm, _ = scripted("4,812", "Yes")
    result = dr.ask(PARAPHRASE, llm=llm, config=AskConfig.of(**CHAT, max_rounds=1))
    assert nodes_of(result.trace) == ["plan", "memory", "retrieve", "rerank", "answer", "validate"]
    (memory,) = entries(result.trace, "memory")
    (recalled,) = memory["recalled"]
    assert (recalled["id"], recalled["question"]) == (stored.id, QUESTION) and recalled["similarity"] >= SIMILARITY
    assert memory["sub_queries"] == [NEW_QUERY, QUESTION]
    assert memory["hints"] == [{"doc_id": report[1], "page": ANSWER_PAGE}]
    (plan,) = entries(result.trace, "plan")
    assert plan["plan"]["sub_queries"] == [PARAPHRASE]  # the planner's own; the search ran the recalled ones too
    (retrieve,) = entries(result.trace, "retrieve")
    assert [q["sparse"].split(" ")[0] for q in retrieve["queries"]] == ["What", "Northfield", "How"]
    assert len(dr.plans()) == 2  # the paraphrase's validated plan joins it

    llm, _ = scripted("Contactless payment", "Yes")
    unrelated = dr.ask(UNRELATED, llm=llm, config=AskConfig.of(**CHAT, max_rounds=1))
    assert "memory" not in nodes_of(unrelated.trace)
    assert len(entries(unrelated.trace, "retrieve")[0]["queries"]) == 1

    store, embedder = dr.open_store(), dr.embedder  # the scope: plans over the question's documents only
    assert [p.id for p, _ in recall(store, embedder, PARAPHRASE, None)][-1] == stored.id
    assert len(recall(store, embedder, PARAPHRASE, [report[1]])) == 2
    assert recall(store, embedder, PARAPHRASE, ["another-document"]) == []


def test_memory_off_neither_stores_nor_recalls(dr):
    llm, _ = scripted("4,812", "Yes")
    dr.ask(QUESTION, llm=llm, config=AskConfig.of(**CHAT, max_rounds=1, memory=False))
    assert dr.plans() == []
    _refined_run(dr)
    llm, _ = scripted("4,812", "Yes")
    result = dr.ask(PARAPHRASE, llm=llm, config=AskConfig.of(**CHAT, max_rounds=1, memory=False))
    assert "memory" not in nodes_of(result.trace) and len(entries(result.trace, "retrieve")[0]["queries"]) == 1
    assert len(dr.plans()) == 1


def test_memory_never_changes_the_citations(dr):
    _refined_run(dr)
    answers = {}
    for memory in (True, False):
        llm, _ = scripted("4,812", "Yes")
        answers[memory] = dr.ask(PARAPHRASE, llm=llm, config=AskConfig.of(**CHAT, max_rounds=1, memory=memory))
    assert entries(answers[True].trace, "memory") and not entries(answers[False].trace, "memory")
    assert answers[True].answer == answers[False].answer == "4812"
    assert answers[True].claims == answers[False].claims
    assert answers[True].claims[0]["citations"][0]["page"] == ANSWER_PAGE


def test_the_memory_bench_splits_each_document_and_its_rows_name_the_recalled_plans(dr, report, tmp_path):
    """evals.bench_memory: per document, the first ceil(n/2) questions and the rest, one-question documents
    left out; evaluate_answers' rows name the plans each question recalled."""
    from docrefrag.evals.answers import evaluate_answers
    from docrefrag.evals.bench_memory import halves
    from docrefrag.evals.datasets import Question
    from docrefrag.indexes.hybrid import HybridSearcher

    def q(qid: str, doc: str, text: str = QUESTION) -> Question:
        return Question(qid, "mmlongbench", doc, text, "4812", "Int", (ANSWER_PAGE,), ("Table",))

    a1, b1, a2, c1, a3, b2, b3 = (q("a1", "a"), q("b1", "b"), q("a2", "a"), q("c1", "c"), q("a3", "a"),
                                  q("b2", "b"), q("b3", "b"))
    assert halves([a1, b1, a2, c1, a3, b2, b3]) == ([a1, a2, b1, b2], [a3, b3])

    _refined_run(dr)
    (stored,) = dr.plans()
    llm, _ = scripted("4,812", "Yes", "Contactless payment", "Yes")
    rows = evaluate_answers(dr.open_store(), HybridSearcher(dr.open_store(), dr.embedder), llm,
                            [q("p", "transit-review.pdf", PARAPHRASE), q("u", "transit-review.pdf", UNRELATED)],
                            {"transit-review.pdf": report[1]}, tmp_path / "rows.jsonl",
                            AskConfig.of(**CHAT, max_rounds=1), show_progress=False)
    assert [r["recalled"] for r in rows] == [[stored.id], []]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "docrefrag", *args], capture_output=True, text=True, cwd=REPO,
                          env=subprocess_env(), timeout=300)


@pytest.fixture(scope="module")
def survey(tmp_path_factory, ingest, light_pdf):
    """A store of two light_pdf documents, survey.pdf (changed and ingested again by a test) and census.pdf."""
    from docrefrag.indexes.store import Store

    folder = tmp_path_factory.mktemp("memory")
    with Store(folder / "store", create=True) as store:
        ingest(store, light_pdf(folder / "survey.pdf", 1), light_pdf(folder / "census.pdf", 1, tag="census"))
    return folder


def test_memory_on_the_command_line_and_a_retired_document_takes_its_plans(survey, ingest, light_pdf, capsys):
    from docrefrag.api import DocRefrag
    from docrefrag.cli import main
    from docrefrag.indexes.store import Store

    store = str(survey / "store")
    question = ["ask", "Which animal was counted near station s001?", "--store", store, "--quiet", "--answerer",
                "chat", "--hyde", "never", "--max-rounds", "1", "--llm", f"{__name__}:heron_llm"]
    assert main([*question, "--doc", "survey.pdf", "--no-memory"]) == 0
    assert capsys.readouterr().out.startswith("answer: heron")
    with DocRefrag(store=store) as dr:
        assert dr.plans() == []
    assert main([*question, "--doc", "survey.pdf"]) == 0 and main(question) == 0  # one over survey.pdf, one over both
    capsys.readouterr()

    listed = _cli("memory", "list", "--store", store, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["question"] for r in rows] == [question[1]] * 2 and [r["rounds"] for r in rows] == [1, 1]
    assert [len(r["doc_ids"]) for r in rows] == [1, 2] and "embedding" not in rows[0]
    table = _cli("memory", "list", "--store", store)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split() == ["id", "date", "rounds", "conf",
                                                                              "documents", "question"]
    assert "survey.pdf, census.pdf" in table.stdout or "census.pdf, survey.pdf" in table.stdout

    with Store(survey / "store") as s:  # a new version of survey.pdf retires the old one
        (result,) = ingest(s, light_pdf(survey / "survey.pdf", 2))
        assert result.status in ("added", "replaced"), result
    with DocRefrag(store=store) as dr:
        (kept,) = dr.plans()
    assert kept.id == rows[1]["id"]  # the plan over both documents stays; the one over the old version alone goes

    cleared = _cli("memory", "clear", "--store", store)
    assert cleared.returncode == 0 and "removed 1 plan(s)" in cleared.stdout, cleared.stderr
    assert json.loads(_cli("memory", "list", "--store", store, "--json").stdout) == []
    missing = _cli("memory", "list", "--store", str(survey / "none"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("error: no docrefrag store at"), missing.stderr

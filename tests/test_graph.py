"""The ask graph end to end: a generated 6-page report with the answer in a ruled table on page 4 and
a near-duplicate 2018 table on page 2, ingested once per module, asked through `DocRefrag.ask`.

Chat models are scripted (`GenericFakeChatModel`, replies in the order the graph calls it, every
prompt recorded and classified) except in one run with the real default local model. The refinement
loop, SQLite checkpoints, node replacement by dotted path, errors (API and CLI) and the planner's
rules are covered on the same store.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pymupdf
import pytest
from conftest import REPO, subprocess_env
from docrefrag.agents import prompts
from docrefrag.agents.llm import LLMUnavailableError
from docrefrag.agents.planner import MAX_SUB_QUESTIONS, extract_intents, plan_question, sub_questions
from docrefrag.evals.answers import first_round_hits
from docrefrag.graph.context import AskConfig, AskContext
from docrefrag.graph.graph import build_graph
from docrefrag.graph.state import AskState
from docrefrag.indexes.bm25 import STOPWORDS
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.store import Store
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.runtime import Runtime

from docrefrag.api import DocRefrag

QUESTION = "How many passengers did Northfield report in 2019?"
HYDE = "Northfield reported its passenger total for 2019 in the operator table of the annual review."
ANSWER_PAGE = 4
DISTRACTOR_PAGE = 2
PAGE_SIZE = (595, 842)
FILLER = {
    1: "The transit authority summarises its network, fleet renewal and station works for the period under review.",
    2: "Ridership recovered steadily as new timetables were introduced across the regional lines.",
    3: "Maintenance crews replaced signalling equipment and resurfaced platforms at several stations.",
    4: "Operators submitted audited passenger counts for the reporting year, collected at ticket gates.",
    5: "Fare policy remained unchanged while contactless payment was extended to all bus routes.",
    6: "The outlook section describes planned extensions, funding sources and procurement timelines.",
}
TABLES = {
    DISTRACTOR_PAGE: ("2018", [["Northfield", "2018", "3,907"], ["Eastbrook", "2018", "2,114"]]),
    ANSWER_PAGE: ("2019", [["Eastbrook", "2019", "2,305"], ["Northfield", "2019", "4,812"], ["Westmere", "2019", "1,566"]]),
}


# ---------------------------------------------------------------- the document and scripted models


def _ruled_table(page: pymupdf.Page, rows: list[list[str]], top: float, caption: str) -> None:
    """Cells in three 160-pt columns, 22-pt rows, every row and column ruled (pymupdf4llm finds it)."""
    for i, row in enumerate(rows):
        y = top + i * 22
        for j, cell in enumerate(row):
            page.insert_text((60 + j * 160, y + 15), cell, fontsize=11)
        page.draw_line((55, y), (535, y))
    bottom = top + len(rows) * 22
    page.draw_line((55, bottom), (535, bottom))
    for j in range(4):
        page.draw_line((55 + j * 160, top), (55 + j * 160, bottom))
    page.insert_text((50, bottom + 20), caption, fontsize=10)


def make_report(path: Path) -> Path:
    """Six A4 pages of filler without digits; passenger tables for 2018 (page 2) and 2019 (page 4)."""
    doc = pymupdf.open()
    for n, filler in FILLER.items():
        page = doc.new_page(width=PAGE_SIZE[0], height=PAGE_SIZE[1])
        page.insert_text((50, 60), f"Regional transit review, part {'ABCDEF'[n - 1]}", fontsize=16)
        page.insert_textbox(pymupdf.Rect(50, 90, 545, 300), f"{filler} " * 3, fontsize=11)
        if n in TABLES:
            year, rows = TABLES[n]
            _ruled_table(page, [["Operator", "Year", "Passengers"], *rows], 320, f"Passengers reported by operator, {year}.")
    doc.save(path)
    doc.close()
    return path


# the fixed part of each prompt template, to tell which agent called the model
PROMPT_MARKERS = {
    "decompose": prompts.DECOMPOSE.split("{")[0],
    "hyde": prompts.HYDE.split("{")[0],
    "answer": prompts.ANSWER_USER.rsplit("}", 1)[1],
    "validate": prompts.VALIDATE.rsplit("}", 1)[1],
    "refine": prompts.REFINE.split("{")[0],
}


def prompt_kind(prompt: str) -> str:
    kinds = [k for k, marker in PROMPT_MARKERS.items() if marker in prompt]
    assert len(kinds) == 1, f"cannot tell which agent sent {prompt[:200]!r}"
    return kinds[0]


class _Prompts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.seen: list[str] = []  # the last message of each call
        self.calls: list[list] = []  # every message of each call

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.seen.append(str(messages[0][-1].content))
        self.calls.append(messages[0])


def scripted(*replies: str | Exception) -> tuple[GenericFakeChatModel, list[str]]:
    """(model, prompts): the model answers `replies` in order (an exception is raised instead of
    replying); `prompts` collects the last message of every call."""

    def in_order():
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
            yield AIMessage(reply)

    recorder = _Prompts()
    return GenericFakeChatModel(messages=in_order(), callbacks=[recorder]), recorder.seen


def unavailable_llm() -> GenericFakeChatModel:
    """An `--llm module:factory` model: replies once (the answer, or a HyDE passage), then its endpoint is gone."""
    return scripted(HYDE, LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))[0]


def unsupported_llm() -> GenericFakeChatModel:
    """An `--llm module:factory` model that answers a value found on no page and judges it unsupported."""
    return scripted("Southport", "No")[0]


_FLAKY_CALLS: list[int] = []


def flaky_llm() -> GenericFakeChatModel:
    """An `--llm module:factory` model whose endpoint is down the first time it is made, and up after."""
    _FLAKY_CALLS.append(1)
    if len(_FLAKY_CALLS) == 1:
        return scripted(LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))[0]
    return scripted("4,812", "Yes")[0]


def reverse_rerank(state: AskState, runtime: Runtime[AskContext]) -> dict:
    """A replacement rerank node: the retrieved pages in reverse order."""
    hits = state["hits"][::-1]
    return {"hits": hits, "trace": [{"node": "rerank", "note": "reversed", "pages": [h["page"] for h in hits]}]}


def drop_all_hits(state: AskState, runtime: Runtime[AskContext]) -> dict:
    """A replacement rerank node that keeps no page: what a search that matched nothing leaves."""
    return {"hits": [], "trace": [{"node": "rerank", "note": "dropped every page"}]}


def nodes_of(trace: list[dict]) -> list[str]:
    return [entry["node"] for entry in trace]


def entries(trace: list[dict], node: str) -> list[dict]:
    return [entry for entry in trace if entry["node"] == node]


def retrieved_pages(entry: dict) -> list[int]:
    return [h["page"] for h in entry["hits"]]


def assert_plain_data(value, where: str = "state") -> None:
    """Only JSON's own types (exactly: no numpy scalars, tensors, handles)."""
    if type(value) is dict:
        for k, v in value.items():
            assert type(k) is str, f"{where}: key {k!r}"
            assert_plain_data(v, f"{where}.{k}")
    elif type(value) in (list, tuple):
        for i, v in enumerate(value):
            assert_plain_data(v, f"{where}[{i}]")
    else:
        assert value is None or type(value) in (str, int, float, bool), f"{where} is a {type(value).__name__}"


@pytest.fixture(scope="module")
def report(tmp_path_factory, ingest) -> tuple[Path, str]:
    """(store dir, doc id) of the ingested report."""
    folder = tmp_path_factory.mktemp("graph")
    pdf = make_report(folder / "transit-review.pdf")
    with Store(folder / "store", create=True) as store:
        (result,) = ingest(store, pdf)
        assert result.status == "added" and result.pages == len(FILLER), result
    return folder / "store", result.doc_id


@pytest.fixture(scope="module")
def dr(report):
    import torch

    torch.set_num_threads(1)  # as conftest's embedder: the machine's second core is busy
    with DocRefrag(store=report[0]) as api:
        yield api


def read_state(store_dir: Path, thread_id: str):
    """The checkpointed state of a run, through a fresh graph and connection."""
    with closing(sqlite3.connect(store_dir / "checkpoints.sqlite")) as conn:
        return build_graph(checkpointer=SqliteSaver(conn)).get_state({"configurable": {"thread_id": thread_id}})


# ---------------------------------------------------------------- 1. end to end


def test_ask_answers_from_the_table_and_cites_its_region(dr, report):
    store_dir, doc_id = report
    llm, seen = scripted(HYDE, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always"))

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]
    assert "|Northfield|2019|4,812|" in seen[1]  # the answer agent read the table as a table
    assert result.answer == "4,812"
    assert result.confidence == 1.0 and result.rounds == 1
    assert nodes_of(result.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]
    (retrieve,) = entries(result.trace, "retrieve")
    assert ANSWER_PAGE in retrieved_pages(retrieve), retrieve["hits"]

    citation = result.claims[0]["citations"][0]
    assert (citation["doc_id"], citation["page"]) == (doc_id, ANSWER_PAGE)
    assert "4,812" in citation["snippet"]
    x0, y0, x1, y1 = citation["bbox"]
    assert 0 <= x0 < x1 <= PAGE_SIZE[0] and 0 <= y0 < y1 <= PAGE_SIZE[1]
    (holder,) = [c for c in dr.open_store().page_chunks(doc_id, ANSWER_PAGE) if "4,812" in c.text]
    assert tuple(citation["bbox"]) == pytest.approx(holder.bbox)
    with pymupdf.open(store_dir.parent / "transit-review.pdf") as pdf:
        row = [pdf[ANSWER_PAGE - 1].search_for(word)[0] for word in ("Northfield", "4,812")]
    cited = pymupdf.Rect(citation["bbox"])
    assert all(cited.contains(r) for r in row), (cited, row)


def test_ask_with_the_real_local_model(dr, report):
    from docrefrag.core.decoding import decoding_progress

    _, doc_id = report
    reports: list[tuple[int, int]] = []
    with decoding_progress(lambda read, written: reports.append((read, written))):  # as the CLI's progress line
        result = dr.ask(QUESTION, llm=None, config=AskConfig(answerer="chat", max_rounds=1))
    # the graph's nodes report every token loop: the answer's prompt (the pages read), then each token written
    prefills = [read for read, written in reports if written == 0]
    assert prefills and max(prefills) > 300
    answer_loop = [w for r, w in reports if r == max(prefills)]
    assert answer_loop == list(range(len(answer_loop))) and len(answer_loop) > 1
    print(f"\nreal local model: answer {result.answer!r}, confidence {result.confidence}, "
          f"{result.seconds:.1f} s, {result.tokens} answer tokens, claims {result.claims}")
    assert result.answer.strip()
    assert nodes_of(result.trace) in (["plan", "retrieve", "rerank", "answer", "validate"],  # the default HyDE mode:
                                      ["plan", "retrieve", "enrich", "retrieve", "rerank", "answer", "validate"])
    for claim in result.claims:
        for c in claim["citations"]:
            assert c["doc_id"] == doc_id and 1 <= c["page"] <= len(FILLER)
            if c["bbox"] is not None:
                x0, y0, x1, y1 = c["bbox"]
                assert 0 <= x0 < x1 <= PAGE_SIZE[0] and 0 <= y0 < y1 <= PAGE_SIZE[1]


# ---------------------------------------------------------------- 2. the refinement loop

NEW_QUERY = "Northfield passenger count table for the year 2019"


def test_unsupported_answer_is_refined_with_a_new_query(dr):
    llm, seen = scripted(HYDE, "Southport", "No", NEW_QUERY, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", max_rounds=3))

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate", "refine", "answer", "validate"]
    assert nodes_of(result.trace) == ["plan", "retrieve", "rerank", "answer", "validate",
                                      "refine", "retrieve", "rerank", "answer", "validate"]
    first, second = entries(result.trace, "retrieve")
    (refine,) = entries(result.trace, "refine")
    assert refine["query"] == NEW_QUERY and refine["previous"] == QUESTION
    assert (first["round"], second["round"]) == (1, 2)
    assert any(q["sparse"].startswith(NEW_QUERY) and q["dense"].startswith(NEW_QUERY) for q in second["queries"])
    assert not any(NEW_QUERY in q["sparse"] for q in first["queries"])
    assert {q["sparse"] for q in first["queries"]} != {q["sparse"] for q in second["queries"]}
    assert entries(result.trace, "validate")[0]["confidence"] == 0.0
    assert result.rounds == 2 and result.answer == "4,812" and result.confidence == 1.0


def test_refinement_stops_at_max_rounds(dr):
    # a third round would call the model a seventh time: the script has six replies
    llm, seen = scripted(HYDE, "Southport", "No", NEW_QUERY, "Southport", "No")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", max_rounds=2))

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate", "refine", "answer", "validate"]
    assert nodes_of(result.trace)[-1] == "validate" and len(entries(result.trace, "retrieve")) == 2
    assert result.rounds == 2 and result.confidence == 0.0
    # no round found support: the run abstains and says what it withheld
    assert (result.answer, result.withheld, result.claims) == ("Not answerable", "Southport", [])


def test_an_answer_supported_in_the_last_round_is_not_withheld(dr):
    llm, _ = scripted(HYDE, "Southport", "No", NEW_QUERY, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", max_rounds=2))
    assert (result.answer, result.withheld) == ("4,812", "")


def test_abstention_can_be_turned_off(dr):
    llm, _ = scripted(HYDE, "Southport", "No")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", max_rounds=1, abstain=False))
    assert (result.answer, result.withheld, result.confidence) == ("Southport", "", 0.0)


def test_the_best_validated_round_is_the_answer(dr):
    # round 1: "4,812" is on the page (lexical support 1) but the model says No: confidence 0.5 < tau 0.9;
    # round 2: "Southport" is not on any page read and the model says No: 0.0. The run answers round 1's.
    llm, seen = scripted(HYDE, "4,812", "No", NEW_QUERY, "Southport", "No")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", max_rounds=2, tau=0.9,
                                                        abstain=False))
    assert [e["confidence"] for e in entries(result.trace, "validate")] == [0.5, 0.0]
    assert (result.answer, result.confidence, result.rounds) == ("4,812", 0.5, 2)
    assert result.claims[0]["citations"][0]["page"] == ANSWER_PAGE


def test_a_refinement_that_echoes_the_question_searches_its_intents(dr):
    llm, seen = scripted(HYDE, "Southport", "No", QUESTION, "4,812", "Yes")  # the refiner repeats the question
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", max_rounds=2))
    (refine,) = entries(result.trace, "refine")
    first, second = entries(result.trace, "retrieve")
    assert refine["query"] != QUESTION and "Northfield" in refine["query"] and "2019" in refine["query"]
    assert "contain" not in refine["query"]  # not the validator's diagnostic ("the pages read do not contain ...")
    assert [q["sparse"].split(" ")[0] for q in second["queries"]][:1] == [refine["query"].split(" ")[0]]
    assert any(q["sparse"].startswith(QUESTION) for q in second["queries"])  # the question is still searched


def test_short_answer_drops_the_lead_in_and_the_closing_full_stop():
    from docrefrag.agents.answer import short_answer
    from docrefrag.evals.scoring import mmlongbench_score

    replies = {"The answer is 300.": "300", "The answer is: 22": "22", "The short answer is 1.": "1",
               'Short answer: "Paris"': "Paris", "Answer: 4,812": "4,812", "3.5.": "3.5"}
    for reply, answer in replies.items():
        assert short_answer(reply) == answer
    assert mmlongbench_score("300", short_answer("The answer is 300."), "Int") == 1.0
    assert mmlongbench_score("300", "The answer is 300.", "Int") == 0.0  # what the scorer saw before
    # words that only begin like a lead-in, and replies of several sentences, are left as written
    assert short_answer("Answers vary by region.") == "Answers vary by region."  # a sentence keeps its stop
    assert short_answer("Answer the phone") == "Answer the phone"
    assert short_answer("New York.") == "New York"
    for kept in ("U.S.", "Apple Inc.", "Washington, D.C.", "10 a.m.", "The answer is"):  # abbreviations, a bare lead-in
        assert short_answer(kept) == kept
    assert short_answer("The answer is not in the document.") == "Not answerable"  # an abstention, before the lead-in goes


def test_abstentions_are_written_as_not_answerable():
    from docrefrag.agents.answer import canonical, is_unanswerable
    from docrefrag.agents.validation import lexical_support

    assert canonical("Not answerable.") == canonical("Unanswerable") == canonical("  ") == "Not answerable"
    assert canonical(" 4,812 ") == "4,812" and canonical("None") == "None"  # "None" may be a real answer
    assert is_unanswerable("None") and is_unanswerable("unanswerable.") and not is_unanswerable("4,812")
    assert lexical_support("5002", "the firm had 5,002 employees") == 1.0  # one number, written two ways
    assert lexical_support("1,234,567 km", "a total of 1234567 km") == 1.0
    assert lexical_support("3,5", "a rate of 3.5") == 0.0  # a decimal comma is not a thousands separator


def test_tau_zero_never_refines(dr):
    llm, seen = scripted(HYDE, "Southport", "No")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", tau=0.0))

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]
    assert nodes_of(result.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]
    assert result.rounds == 1 and result.confidence == 0.0


def test_disagreeing_branches_bring_hyde_and_a_second_search(dr):
    """The default HyDE mode: the passage is written only when the question's search finds the branches'
    query disagreement at or above the threshold, then the question is searched again; once per run."""
    llm, seen = scripted("4,812", "Yes")
    never = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="never", max_rounds=1))
    assert [prompt_kind(p) for p in seen] == ["answer", "validate"]
    first = entries(never.trace, "retrieve")[0]["queries"][0]
    q = first["query_disagreement"]  # rounded to 3 decimals
    assert 0.0 <= q <= 0.98
    assert first["switched_off"] == {"sparse": 0, "dense": 0}  # no branch fails on the generated report

    llm, seen = scripted("4,812", "Yes")
    calm = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", disagreement=q + 0.01))
    assert [prompt_kind(p) for p in seen] == ["answer", "validate"]
    assert nodes_of(calm.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]

    config = AskConfig(answerer="chat", disagreement=max(q - 0.01, 0.0), max_rounds=1)
    llm, seen = scripted(HYDE, "4,812", "Yes")
    once = dr.ask(QUESTION, llm=llm, config=config, thread_id="hyde-thread")
    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]
    assert nodes_of(once.trace) == ["plan", "retrieve", "enrich", "retrieve", "rerank", "answer", "validate"]
    # the evaluation reports the pages of round 1's last search, the one the answer was chosen from
    assert [h["page"] for h in first_round_hits(once.trace)] == retrieved_pages(entries(once.trace, "retrieve")[1])
    llm, seen = scripted(HYDE, "4,812", "Yes")  # the same thread again: a new run decides afresh
    dr.ask(QUESTION, llm=llm, config=config, thread_id="hyde-thread")
    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]

    # threshold 0: every search qualifies, yet the passage is written once, in round 1 only
    llm, seen = scripted(HYDE, "Southport", "No", NEW_QUERY, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", disagreement=0.0))
    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate", "refine", "answer", "validate"]
    assert nodes_of(result.trace) == ["plan", "retrieve", "enrich", "retrieve", "rerank", "answer", "validate",
                                      "refine", "retrieve", "rerank", "answer", "validate"]
    (hyde,) = entries(result.trace, "enrich")
    assert hyde["hyde"] == HYDE and hyde["query_disagreement"] == pytest.approx(q, abs=1e-3)
    before, after, _ = entries(result.trace, "retrieve")
    assert HYDE not in before["queries"][0]["dense"] and HYDE[:100] in after["queries"][0]["dense"]
    assert before["queries"][0]["sparse"] == after["queries"][0]["sparse"]  # HyDE is for the dense branch only
    assert result.answer == "4,812" and result.rounds == 2


def test_disagreeing_branches_bring_sub_queries_in_that_mode(dr):
    """decompose="disagreement" (with HyDE's default mode): on disagreement the enrich node writes the
    HyDE passage and the sub-queries, and the second search runs the question and each sub-query."""
    sub = "Which table lists the Northfield passengers?"
    llm, seen = scripted(HYDE, f"1. {sub}", "4,812", "Yes")
    config = AskConfig(answerer="chat", decompose="disagreement", disagreement=0.0, max_rounds=1)
    result = dr.ask(QUESTION, llm=llm, config=config)
    assert [prompt_kind(p) for p in seen] == ["hyde", "decompose", "answer", "validate"]
    assert nodes_of(result.trace) == ["plan", "retrieve", "enrich", "retrieve", "rerank", "answer", "validate"]
    (enriched,) = entries(result.trace, "enrich")
    assert enriched["sub_queries"] == [QUESTION, sub] and enriched["hyde"] == HYDE
    before, after = entries(result.trace, "retrieve")
    assert len(before["queries"]) == 1 and len(after["queries"]) == 2
    assert after["queries"][0]["sparse"].startswith(QUESTION) and after["queries"][1]["sparse"].startswith(sub)

    llm, seen = scripted(f"1. {sub}", "4,812", "Yes")  # decomposition alone, on disagreement
    config = AskConfig(answerer="chat", hyde="never", decompose="disagreement", disagreement=0.0, max_rounds=1)
    dr.ask(QUESTION, llm=llm, config=config)
    assert [prompt_kind(p) for p in seen] == ["decompose", "answer", "validate"]


def test_enrich_route_only_in_round_one_and_once():
    from types import SimpleNamespace

    from docrefrag.graph.graph import route_after_retrieve

    def route(hyde="disagreement", decompose="never", **state):  # the default modes
        config = AskConfig(hyde=hyde, decompose=decompose, disagreement=0.5)
        runtime = SimpleNamespace(context=SimpleNamespace(config=config))
        plan = {"hyde": "", "sub_queries": [QUESTION]}
        return route_after_retrieve({"round": 1, "query_disagreement": 0.5, "plan": plan, **state}, runtime)

    assert route() == route(hyde="never", decompose="disagreement") == "enrich"
    assert route(query_disagreement=0.49) == "rerank"
    assert route(round=2, query_disagreement=0.9) == "rerank"  # a refined query's disagreement brings nothing new
    assert route(enriched=True) == "rerank"
    assert route(plan={"hyde": HYDE}) == "rerank"
    assert route(hyde="never", decompose="disagreement", plan={"sub_queries": [QUESTION, "Which table?"]}) == "rerank"
    assert route(hyde="always") == route(hyde="never") == "rerank"


class _SlowChat(GenericFakeChatModel):
    """Scripted replies, each after 0.3 s."""

    def _generate(self, *args, **kwargs):
        time.sleep(0.3)
        return super()._generate(*args, **kwargs)


def test_time_to_first_answer_counts_the_planning(dr):
    llm = _SlowChat(messages=iter([AIMessage(HYDE), AIMessage("4,812"), AIMessage("Yes")]))
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", max_rounds=1))
    assert result.answer == "4,812"
    assert 0.6 <= result.ttft_s <= result.seconds  # the HyDE passage and the answer, not the answer alone


# ---------------------------------------------------------------- 3. checkpoints


def test_finished_run_is_checkpointed_as_plain_data(dr, report):
    store_dir, _ = report
    llm, _ = scripted(HYDE, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always"),
                    thread_id="checkpointed-run")
    assert result.thread_id == "checkpointed-run"

    snapshot = read_state(store_dir, "checkpointed-run")
    values = snapshot.values
    assert snapshot.next == ()
    assert values["question"] == QUESTION and values["answer"] == "4,812"
    assert values["claims"] == result.claims and values["trace"] == result.trace
    assert values["plan"]["hyde"] == HYDE and values["verdict"]["supported"] is True
    json.dumps(values)
    assert_plain_data(values)


# ---------------------------------------------------------------- 4. nodes replaced by configuration


def test_rerank_node_replaced_by_dotted_path(dr, report):
    _, doc_id = report
    llm, seen = scripted(HYDE, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always", max_rounds=1),
                    nodes={"rerank": f"{__name__}:reverse_rerank"})

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]
    (retrieve,) = entries(result.trace, "retrieve")
    (rerank,) = entries(result.trace, "rerank")
    (answer,) = entries(result.trace, "answer")
    fused = retrieved_pages(retrieve)
    assert len(fused) > 3 and rerank["note"] == "reversed" and rerank["pages"] == fused[::-1]
    read = [tuple(p) for p in answer["pages"]]
    assert read == [(doc_id, p) for p in fused[::-1][: AskConfig().pages]]
    assert read != [(doc_id, p) for p in fused[: AskConfig().pages]]


def test_chat_reranker_orders_the_pages_by_the_local_models_relevance(dr, report):
    from docrefrag.agents.llm import LocalChatModel

    _, doc_id = report
    local = LocalChatModel(max_new_tokens=8)
    config = AskConfig(answerer="chat", rerank=True, reranker="chat", hyde="never", max_rounds=1)
    assert not config.needs_reader
    result = dr.ask(QUESTION, llm=local, config=config)

    (retrieve,) = entries(result.trace, "retrieve")
    (rerank,) = entries(result.trace, "rerank")
    scores = [h["rerank"] for h in rerank["hits"]]
    assert sorted(retrieved_pages(rerank)) == sorted(retrieved_pages(retrieve))
    assert all(0 < s < 1 for s in scores) and scores == sorted(scores, reverse=True)
    (answer,) = entries(result.trace, "answer")
    assert [tuple(p) for p in answer["pages"]] == [(doc_id, p) for p in retrieved_pages(rerank)[: config.pages]]


def test_chat_reranker_needs_a_local_model(dr):
    llm, seen = scripted(HYDE, "4,812", "Yes")
    with pytest.raises(ValueError, match="local model's logits.*--llm local or local:DIR"):
        dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", rerank=True, reranker="chat"))
    assert not seen  # refused before any call
    with pytest.raises(ValueError, match="reranker must be 'reader' or 'chat'"):
        AskConfig(reranker="bm25")


@pytest.mark.parametrize("answerer", ["reader", "chat"])
def test_no_page_to_read_is_not_answerable_without_reading(dr, answerer):
    llm, seen = scripted()  # any call to the model would raise: it has no reply to give
    result = dr.ask(QUESTION, llm=llm, config=AskConfig(answerer=answerer, hyde="never", max_rounds=1),
                    nodes={"rerank": f"{__name__}:drop_all_hits"})

    assert seen == [] and result.answer == "Not answerable" and result.claims == []
    (answer,) = entries(result.trace, "answer")
    assert answer["pages"] == []


def test_build_graph_rejects_unknown_node_names():
    with pytest.raises(ValueError, match=r"unknown node 'rank'.*rerank"):
        build_graph(nodes={"rank": reverse_rerank})


@pytest.mark.parametrize("path", [f"{__name__}.reverse_rerank", f"{__name__}:no_such_node",
                                  "no_such_package.nodes:rerank", ":reverse_rerank"])
def test_build_graph_rejects_bad_dotted_paths(path):
    with pytest.raises(ValueError, match="package.module:function|cannot import"):
        build_graph(nodes={"rerank": path})


# ---------------------------------------------------------------- 5. errors


def _cli(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = subprocess_env()
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "docrefrag", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)


def test_ask_on_an_empty_store_says_to_ingest(store):
    llm, seen = scripted()
    with DocRefrag(store=store.root) as api, pytest.raises(StoreError, match="docrefrag ingest"):
        api.ask(QUESTION, llm=llm)
    assert seen == []


@pytest.mark.parametrize("created", [True, False], ids=["empty-store", "no-store"])
def test_cli_ask_on_an_empty_store_is_one_line(tmp_path, created):
    if created:
        Store(tmp_path / "store", create=True).close()
    proc = _cli("ask", "q", "--store", str(tmp_path / "store"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "docrefrag ingest" in line


def test_llm_failure_mid_run_surfaces_and_keeps_the_checkpoint(dr, report):
    store_dir, _ = report
    llm, seen = scripted(HYDE, LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))
    with pytest.raises(LLMUnavailableError, match="127.0.0.1:9"):
        dr.ask(QUESTION, llm=llm, config=AskConfig(answerer="chat", hyde="always"), thread_id="failed-run")
    assert [prompt_kind(p) for p in seen] == ["hyde", "answer"]

    snapshot = read_state(store_dir, "failed-run")
    assert snapshot.next == ("answer",)
    assert snapshot.values["plan"]["hyde"] == HYDE and snapshot.values["hits"]
    assert not snapshot.values.get("answer")
    assert nodes_of(snapshot.values["trace"]) == ["plan", "retrieve", "rerank"]


def test_a_failed_run_names_its_id_and_resumes_where_it_stopped(dr):
    config = AskConfig(answerer="chat", hyde="always")
    llm, _ = scripted(HYDE, LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))
    with pytest.raises(LLMUnavailableError) as failure:
        dr.ask(QUESTION, llm=llm, config=config, thread_id="resumable")
    assert any("run id resumable" in note and "--resume resumable" in note for note in failure.value.__notes__)

    llm, seen = scripted("4,812", "Yes")  # the endpoint is back: only the answer and the validation are left
    result = dr.resume("resumable", llm=llm, config=config)
    assert [prompt_kind(p) for p in seen] == ["answer", "validate"]
    assert result.question == QUESTION and result.answer == "4,812" and result.confidence == 1.0
    assert nodes_of(result.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]
    with pytest.raises(ValueError, match="nothing to resume"):
        dr.resume("resumable", llm=llm, config=config)  # finished
    with pytest.raises(ValueError, match="nothing to resume"):
        dr.resume("no-such-run", llm=llm, config=config)


def test_a_reused_thread_reports_only_its_own_run(dr):
    config = AskConfig(answerer="chat", hyde="always", max_rounds=1)
    first = dr.ask(QUESTION, llm=scripted(HYDE, "Southport", "No")[0], config=config, thread_id="reused")
    second = dr.ask(QUESTION, llm=scripted(HYDE, "4,812", "Yes")[0], config=config, thread_id="reused")
    assert (first.answer, first.withheld) == ("Not answerable", "Southport") and second.answer == "4,812"
    assert nodes_of(second.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]
    assert entries(second.trace, "answer")[0]["answer"] == "4,812"
    assert 0 < second.ttft_s <= second.seconds and second.ttft_s != first.ttft_s  # measured on this run


@pytest.mark.parametrize("args, message", [
    ([], "--resume RUN_ID"), (["a question", "--resume", "abc"], "--resume RUN_ID"),
    (["--resume", "abc", "--doc", "x"], "drop --doc"), (["a question", "--llm-timeout", "0"], "--llm-timeout must be > 0"),
])
def test_cli_ask_checks_its_arguments_in_one_line(tmp_path, capsys, args, message):
    from docrefrag.cli import main

    assert main(["ask", *args, "--store", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_cli_llm_failure_is_one_line(tmp_path, ingest, light_pdf):
    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1))
    # pytest imports this file as the top-level module `test_graph` from tests/
    proc = _cli("ask", QUESTION, "--store", str(tmp_path / "store"), "--quiet", "--answerer", "chat",
                "--llm", f"{__name__}:unavailable_llm", pythonpath=Path(__file__).parent)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: LLM endpoint http://127.0.0.1:9/v1 refused the connection")


@pytest.mark.parametrize("abstain", [True, False], ids=["abstains", "answers"])
def test_cli_says_in_one_line_when_the_answer_is_not_supported(tmp_path, ingest, light_pdf, capsys, abstain):
    from docrefrag.cli import main

    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1))
    (tmp_path / "ask.toml").write_text(f"abstain = {str(abstain).lower()}\nhyde = 'never'\nmax_rounds = 1\n")
    assert main(["ask", QUESTION, "--store", str(tmp_path / "store"), "--quiet", "--answerer", "chat",
                 "--config", str(tmp_path / "ask.toml"), "--llm", f"{__name__}:unsupported_llm"]) == 0
    out = capsys.readouterr().out.splitlines()
    reason = "the pages read do not contain 'Southport'; the validator's confidence 0.00 is below 0.50"
    if abstain:
        assert out[0] == "answer: Not answerable"
        assert out[1] == f"  withheld: 'Southport' is not supported by the pages read ({reason})"
    else:
        assert out[0] == "answer: Southport"
        assert out[1] == f"  NOT SUPPORTED by the pages read: {reason}"
    assert out[-1].startswith("confidence 0.00, 1 round(s)")


def test_a_resume_runs_with_the_options_the_run_was_started_with(dr):
    from docrefrag.graph.runs import RunOptions

    config = AskConfig(answerer="chat", hyde="always", max_rounds=1, abstain=False)
    llm, _ = scripted(HYDE, LLMUnavailableError("refused the connection", 3, url="http://127.0.0.1:9/v1"))
    with pytest.raises(LLMUnavailableError):
        dr.ask(QUESTION, llm=llm, config=config, thread_id="stored-options")
    assert dr.run_options("stored-options") == RunOptions(None, config, None)  # a model object: no spec to store
    with pytest.raises(ValueError, match="started with max_rounds = 1, not 2; drop that option"):
        dr.resume("stored-options", llm=scripted()[0], config=replace(config, max_rounds=2))
    with pytest.raises(ValueError, match="chat model passed as an object, which is not stored"):
        dr.resume("stored-options")
    result = dr.resume("stored-options", llm=scripted("Southport", "No")[0])  # config: the stored one
    assert (result.answer, result.rounds, result.withheld) == ("Southport", 1, "")  # one round, no abstention


def test_cli_resume_takes_the_stored_options_and_refuses_a_conflict(tmp_path, ingest, light_pdf, capsys):
    from docrefrag.cli import main

    with Store(tmp_path / "store", create=True) as store:
        ingest(store, light_pdf(tmp_path / "survey.pdf", 1))
    common = ["--store", str(tmp_path / "store"), "--quiet"]
    _FLAKY_CALLS.clear()
    assert main(["ask", QUESTION, *common, "--answerer", "chat", "--hyde", "never", "--max-rounds", "1",
                 "--llm", f"{__name__}:flaky_llm"]) == 2
    run_id = re.search(r"--resume (\w+)", capsys.readouterr().err).group(1)

    assert main(["ask", "--resume", run_id, *common, "--max-rounds", "2"]) == 2
    assert "started with max_rounds = 1, not 2" in capsys.readouterr().err
    assert main(["ask", "--resume", run_id, *common, "--llm", "local"]) == 2
    assert f"started with llm = '{__name__}:flaky_llm', not 'local'" in capsys.readouterr().err
    assert len(_FLAKY_CALLS) == 1  # refused before a model was made

    assert main(["ask", "--resume", run_id, *common]) == 0  # the stored --llm, --answerer, --hyde, --max-rounds
    assert capsys.readouterr().out.splitlines()[0] == "answer: 4,812"
    assert len(_FLAKY_CALLS) == 2


# ---------------------------------------------------------------- 6. planner rules


def test_extract_intents_rules():
    question = "Which operator in Table 4 and the chart had 4,812 passengers at Northfield Central in 2019?"
    plan = extract_intents(question)
    assert plan.sub_queries == [question] and plan.hyde == ""
    assert "Table 4" in plan.visual_anchors
    assert {"chart", "table"} <= set(plan.evidence_types)
    assert {"4,812", "2019", "4", "Northfield Central"} <= set(plan.entities)
    assert "Which" not in plan.entities
    assert {"operator", "chart", "passengers", "northfield", "central", "2019"} <= set(plan.keywords)
    assert not set(plan.keywords) & (STOPWORDS | {"which", "the", "in", "at", "and"})
    assert len(plan.keywords) == len(set(plan.keywords))


def test_extract_intents_defaults_to_text_evidence():
    plan = extract_intents("what did the committee decide about fares?")
    assert plan.evidence_types == ["text"] and plan.visual_anchors == [] and plan.entities == []
    assert plan.keywords == ["committee", "decide", "about", "fares"]


def test_plan_question_survives_a_garbage_decomposition():
    garbage = '{"sub_queries": [{"name": "sub_query1", "type": "json"'
    llm, seen = scripted(garbage, HYDE)
    plan, notes = plan_question(QUESTION, llm, decompose=True, hyde=True)
    # one decomposition request, then the HyDE passage
    assert len(seen) == 2 and prompt_kind(seen[0]) == "decompose" and prompt_kind(seen[-1]) == "hyde"
    assert plan.sub_queries == [QUESTION] and plan.hyde == HYDE
    assert len(notes) == 1 and notes[0].startswith("decomposition gave no usable sub-question")


def test_plan_question_keeps_the_usable_sub_questions():
    question = "Which operator carried 4,812 passengers at Northfield Central, and when did it open?"
    reply = ("1. Which operator carried 4,812 passengers?\n2) Question: In which year did Northfield Central open?\n"
             f"- {question}\n* What is the weather like on Mars?\nPassengers by operator\n"
             "3. Which operator carried 4,812 passengers?")
    llm, _ = scripted(reply)
    plan, notes = plan_question(question, llm, decompose=True, hyde=False)
    # numbering and "Question:" stripped; the question itself, an off-topic line, a non-question and a repeat dropped
    assert plan.sub_queries[1:] == ["Which operator carried 4,812 passengers?", "In which year did Northfield Central open?"]
    assert notes == []


def test_a_repeated_question_is_one_fact_not_a_failure():
    llm, _ = scripted(f"1. {QUESTION}")
    plan, notes = plan_question(QUESTION, llm, decompose=True, hyde=False)
    assert plan.sub_queries == [QUESTION] and notes == []


def test_sub_questions_are_bounded():
    reply = "\n".join(f"{i}. How many passengers in year {2000 + i}?" for i in range(1, 9))
    assert sub_questions(reply, "How many passengers per year?") == [
        f"How many passengers in year {2000 + i}?" for i in range(1, MAX_SUB_QUESTIONS + 1)]


# ---------------------------------------------------------------- 7. evaluation with answer extraction


def test_evaluation_scores_the_extracted_answer(dr, report, tmp_path):
    """The official two-step protocol: the extractor continues the prefilled "Question/Analysis" turn
    after the benchmark's prompt; its "Extracted answer" is scored, an unparseable reply scores 0."""
    from docrefrag.evals.answers import evaluate_answers, summarise
    from docrefrag.evals.datasets import Question
    from docrefrag.evals.scoring import EXTRACTION_PROMPT
    from docrefrag.indexes.hybrid import HybridSearcher

    doc_id = report[1]
    questions = [Question(f"q{i}", "mmlongbench", "transit-review.pdf", QUESTION, "4812", "Int", (ANSWER_PAGE,), ("Table",))
                 for i in (1, 2)]
    reply = "Northfield reported 4,812 passengers in 2019."
    llm, _ = scripted(HYDE, reply, "Yes", HYDE, reply, "Yes")
    extractor = GenericFakeChatModel(messages=iter([AIMessage("Extracted answer: 4812\nAnswer format: Integer"),
                                                    AIMessage("I cannot tell.")]))
    seen = _Prompts()
    extractor.callbacks = [seen]
    rows = evaluate_answers(dr.open_store(), HybridSearcher(dr.open_store(), dr.embedder), llm, questions, {"transit-review.pdf": doc_id},
                            tmp_path / "answers.jsonl", AskConfig(answerer="chat", hyde="always"), show_progress=False,
                            extractor=extractor)
    first, second = rows
    assert (first["response"], first["pred"], first["extracted_format"], first["score"]) == (reply, "4812", "Integer", 1.0)
    assert (second["pred"], second["score"]) == (None, 0.0)
    user, prefill = seen.calls[0]
    assert user.content == EXTRACTION_PROMPT and prefill.type == "ai"
    assert prefill.content == f"\n\nQuestion:{QUESTION}\nAnalysis:{reply}\n"
    assert first["score_without_extraction"] == 0.0
    assert summarise("mmlongbench", rows, "local")["extraction"] == (
        "two-step protocol with MMLongBench-Doc's extraction prompt, extractor local; accuracy without extraction 0.000")


# ---------------------------------------------------------------- 8. run settings from a file


def test_ask_config_from_a_file_with_cli_overrides(tmp_path):
    from docrefrag.cli import _ask_config, build_parser

    toml = tmp_path / "run.toml"
    toml.write_text('max_rounds = 3\ntau = 1\nanswerer = "chat"\nhyde = "never"\nfusion = "rrf"\n')
    config = AskConfig.from_file(toml)
    assert (config.max_rounds, config.tau, config.answerer, config.hyde, config.fusion) == (3, 1.0, "chat", "never", "rrf")
    (tmp_path / "run.json").write_text(json.dumps({"pages": 5}))
    assert AskConfig.from_file(tmp_path / "run.json").pages == 5
    args = build_parser().parse_args(["ask", "q", "--config", str(toml), "--max-rounds", "1", "--pages", "4"])
    config = _ask_config(args)  # the file, then the options given on the command line
    assert (config.max_rounds, config.answerer, config.pages, config.fusion) == (1, "chat", 4, "rrf")
    assert _ask_config(build_parser().parse_args(["ask", "q"])) == AskConfig()
    assert _ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml), "--hyde", "always"])).hyde == "always"
    toml.write_text("rerank = true\n")
    assert _ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml)])).rerank
    assert not _ask_config(build_parser().parse_args(["ask", "q", "--config", str(toml), "--no-rerank"])).rerank
    chat = _ask_config(build_parser().parse_args(["ask", "q", "--reranker", "chat"]))
    assert chat.rerank and chat.reranker == "chat"
    assert not _ask_config(build_parser().parse_args(["ask", "q", "--reranker", "chat", "--no-rerank"])).rerank


@pytest.mark.parametrize("text, message", [
    ("max_round = 3\n", "unknown setting(s) max_round; known: max_rounds"),
    ("max_rounds = 2.5\n", "max_rounds must be of type int, got 2.5"),
    ("hyde = false\n", "hyde must be of type str, got False (when to write"),
    ('hyde = "sometimes"\n', "hyde must be one of disagreement, always, never"),
    ("disagreement = 2\n", "disagreement is a query disagreement in [0, 1]"),
    ("max_rounds = 0\n", "max_rounds must be >= 1"),
    ("max_rounds = \n", "is not valid TOML"),
    ('fusion = "bogus"\n', "fusion must be one of"),
    ("reader_pages = 0\n", "reader_pages (--pages with the reader) is the number of pages read and must be >= 1, got 0"),
])
def test_ask_config_file_errors_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        AskConfig.from_file(path)
    with pytest.raises(ValueError, match="does not exist"):
        AskConfig.from_file(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="cannot be read .*pass a TOML or JSON file"):
        AskConfig.from_file(tmp_path)  # a folder


def test_eval_refuses_planner_options_for_the_baselines(tmp_path, capsys):
    from docrefrag.cli import main

    rc = main(["eval", "mmlongbench", "--data", str(tmp_path), "--store", str(tmp_path / "s"), "--baselines",
               "--hyde", "always"])
    err = capsys.readouterr().err
    assert rc != 0 and "--hyde applies only to end-to-end runs; drop --baselines or --hyde" in err


def test_eval_refuses_a_chat_reranker_without_a_local_model(tmp_path, capsys):
    from docrefrag.cli import main

    rc = main(["eval", "mmlongbench", "--data", str(tmp_path), "--store", str(tmp_path / "s"), "--retrieval-only",
               "--reranker", "chat", "--llm", "openai:some-model@http://127.0.0.1:9/v1"])
    err = capsys.readouterr().err
    assert rc != 0 and "the chat reranker reads P('Yes') from a local model's logits" in err and "--llm local" in err
    assert not (tmp_path / "s").exists()  # refused before the store was created


@pytest.mark.parametrize("mode", ["--retrieval-only", "--baselines"])
def test_eval_refuses_end_to_end_options_it_would_ignore(tmp_path, capsys, mode):
    from docrefrag.cli import main

    rc = main(["eval", "mmlongbench", "--data", str(tmp_path), "--store", str(tmp_path / "s"), mode, "--extractor", "local"])
    err = capsys.readouterr().err
    assert rc != 0 and f"--extractor applies only to end-to-end runs; drop {mode} or --extractor" in err
    assert not (tmp_path / "s").exists()  # refused before anything was opened


def test_the_cli_offers_the_graphs_plan_modes():
    from docrefrag.graph.context import PLAN_MODES

    from docrefrag import cli

    assert cli.PLAN_MODES == PLAN_MODES

"""The ask graph's answers: the generated report's table read and cited end to end, the refinement
loop (a new query after an unsupported answer, the round limit, abstention, the best validated
round), the short answer and abstention wording, and the time to the first answer.

Chat models are scripted (conftest's `scripted`); the report is conftest's `report`.
"""

from __future__ import annotations

import time

import pymupdf
import pytest
from conftest import (
    ANSWER_PAGE,
    HYDE,
    NEW_QUERY,
    PAGE_SIZE,
    QUESTION,
    entries,
    nodes_of,
    prompt_kind,
    retrieved_pages,
    scripted,
)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from docrefrag.graph.context import AskConfig


def test_ask_answers_from_the_table_and_cites_its_region(dr, report):
    store_dir, doc_id = report
    llm, seen = scripted(HYDE, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always"))

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]
    assert "Northfield | Year: 2019 | Passengers: 4,812" in seen[1]  # each table row with its column names
    assert result.answer == "4812"
    assert result.confidence == 1.0 and result.rounds == 1
    assert nodes_of(result.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]
    (retrieve,) = entries(result.trace, "retrieve")
    assert ANSWER_PAGE in retrieved_pages(retrieve), retrieve["hits"]

    citation = result.claims[0]["citations"][0]
    assert (citation["doc_id"], citation["page"]) == (doc_id, ANSWER_PAGE)
    assert "4,812" in citation["snippet"]
    x0, y0, x1, y1 = citation["bbox"]
    assert 0 <= x0 < x1 <= PAGE_SIZE[0] and 0 <= y0 < y1 <= PAGE_SIZE[1]
    (holder,) = [c for c in dr.open_store().pages.regions(doc_id, ANSWER_PAGE) if "4,812" in c.text]  # the table
    assert tuple(citation["bbox"]) == pytest.approx(holder.bbox)
    with pymupdf.open(store_dir.parent / "transit-review.pdf") as pdf:
        row = [pdf[ANSWER_PAGE - 1].search_for(word)[0] for word in ("Northfield", "4,812")]
    cited = pymupdf.Rect(citation["bbox"])
    assert all(cited.contains(r) for r in row), (cited, row)


@pytest.mark.parametrize("reply", [NEW_QUERY, f"The search query: {NEW_QUERY}", f'New query: "{NEW_QUERY}"'])
def test_unsupported_answer_is_refined_with_a_new_query(dr, reply):
    """The query is the reply's first line without a label such as "The search query:" or quotes."""
    llm, seen = scripted(HYDE, "Southport", "No", reply, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=3))

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
    assert result.rounds == 2 and result.answer == "4812" and result.confidence == 1.0


def test_refinement_stops_at_max_rounds(dr):
    # a third round would call the model a seventh time: the script has six replies
    llm, seen = scripted(HYDE, "Southport", "No", NEW_QUERY, "Southport", "No")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=2))

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate", "refine", "answer", "validate"]
    assert nodes_of(result.trace)[-1] == "validate" and len(entries(result.trace, "retrieve")) == 2
    assert result.rounds == 2 and result.confidence == 0.0
    # no round found support: the run abstains and says what it withheld
    assert (result.answer, result.withheld, result.claims) == ("Not answerable", "Southport", [])


def test_an_answer_supported_in_the_last_round_is_not_withheld(dr):
    llm, _ = scripted(HYDE, "Southport", "No", NEW_QUERY, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=2))
    assert (result.answer, result.withheld) == ("4812", "")


def test_abstention_can_be_turned_off(dr):
    llm, _ = scripted(HYDE, "Southport", "No")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=1, abstain=False))
    assert (result.answer, result.withheld, result.confidence) == ("Southport", "", 0.0)


def test_the_best_validated_round_is_the_answer(dr):
    # round 1: "4,812" is on the page (lexical support 1) but the model says No: confidence 0.5 < tau 0.9;
    # round 2: "Southport" is not on any page read and the model says No: 0.0. The run answers round 1's.
    llm, seen = scripted(HYDE, "4,812", "No", NEW_QUERY, "Southport", "No")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=2, tau=0.9,
                                                        abstain=False))
    assert [e["confidence"] for e in entries(result.trace, "validate")] == [0.5, 0.0]
    assert (result.answer, result.confidence, result.rounds) == ("4812", 0.5, 2)
    assert result.claims[0]["citations"][0]["page"] == ANSWER_PAGE


def test_a_refinement_that_echoes_the_question_searches_its_intents(dr):
    llm, seen = scripted(HYDE, "Southport", "No", QUESTION, "4,812", "Yes")  # the refiner repeats the question
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=2))
    (refine,) = entries(result.trace, "refine")
    first, second = entries(result.trace, "retrieve")
    assert refine["query"] != QUESTION and "Northfield" in refine["query"] and "2019" in refine["query"]
    assert "contain" not in refine["query"]  # not the validator's diagnostic ("the pages read do not contain ...")
    assert [q["sparse"].split(" ")[0] for q in second["queries"]][:1] == [refine["query"].split(" ")[0]]
    assert any(q["sparse"].startswith(QUESTION) for q in second["queries"])  # the question is still searched


def test_a_reply_that_restates_the_question_is_read_as_what_follows_it():
    from docrefrag.agents.answer import final_answer

    assert final_answer("What is the CAGR of television from 2012 to 2016?",
                        "The CAGR of television from 2012 to 2016 is 14.3%. It grew fast.") == "14.3%"
    assert final_answer("Which individual lead this program?",
                        "The individual who lead this program is Allison Crimmins. She is the director.") == \
        "Allison Crimmins"
    assert final_answer("what's the topic of UNIT 14?", 'The topic of UNIT 14 is "Using Financial Information".') == \
        "Using Financial Information"
    for question, reply in [("What is the capital of France?", "Paris is the capital of France."),
                            ("Who leads the program?", "Allison Crimmins"),
                            ("What is the growth?", "Revenue growth was 4%.")]:  # "revenue" is no word of the question
        assert final_answer(question, reply) == reply


def test_short_answer_drops_the_lead_in_and_the_closing_full_stop():
    from docrefrag.agents.answer import short_answer
    from docrefrag.evals.score_mmlongbench import mmlongbench_score

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
    # an abstention, before the lead-in goes
    assert short_answer("The answer is not in the document.") == "Not answerable"


def test_abstentions_are_written_as_not_answerable():
    from docrefrag.agents.answer import canonical, is_unanswerable
    from docrefrag.agents.forms import lexical_support

    assert canonical("Not answerable.") == canonical("Unanswerable") == canonical("  ") == "Not answerable"
    assert canonical(" 4,812 ") == "4,812" and canonical("None") == "None"  # "None" may be a real answer
    assert is_unanswerable("None") and is_unanswerable("unanswerable.") and not is_unanswerable("4,812")
    assert lexical_support("5002", "the firm had 5,002 employees") == 1.0  # one number, written two ways
    assert lexical_support("1,234,567 km", "a total of 1234567 km") == 1.0
    assert lexical_support("3,5", "a rate of 3.5") == 0.0  # a decimal comma is not a thousands separator


def test_tau_zero_never_refines(dr):
    llm, seen = scripted(HYDE, "Southport", "No")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", tau=0.0))

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]
    assert nodes_of(result.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]
    assert result.rounds == 1 and result.confidence == 0.0


class _SlowChat(GenericFakeChatModel):
    """Scripted replies, each after 0.3 s."""

    def _generate(self, *args, **kwargs):
        time.sleep(0.3)
        return super()._generate(*args, **kwargs)


def test_time_to_first_answer_counts_the_planning(dr):
    llm = _SlowChat(messages=iter([AIMessage(HYDE), AIMessage("4,812"), AIMessage("Yes")]))
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=1))
    assert result.answer == "4812"
    assert 0.6 <= result.ttft_s <= result.seconds  # the HyDE passage and the answer, not the answer alone

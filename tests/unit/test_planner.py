"""The planner's rules: the intents read from a question, a decomposition that is garbage or partly
usable, a repeated question, and the bound on sub-questions.
"""

from __future__ import annotations

from conftest import HYDE, QUESTION, prompt_kind, scripted

from docrefrag.agents.planner import MAX_SUB_QUESTIONS, extract_intents, plan_question, sub_questions
from docrefrag.indexes.bm25 import STOPWORDS


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
    assert plan.sub_queries[1:] == ["Which operator carried 4,812 passengers?",
                                    "In which year did Northfield Central open?"]
    assert notes == []


def test_a_repeated_question_is_one_fact_not_a_failure():
    llm, _ = scripted(f"1. {QUESTION}")
    plan, notes = plan_question(QUESTION, llm, decompose=True, hyde=False)
    assert plan.sub_queries == [QUESTION] and notes == []


def test_sub_questions_are_bounded():
    reply = "\n".join(f"{i}. How many passengers in year {2000 + i}?" for i in range(1, 9))
    assert sub_questions(reply, "How many passengers per year?") == [
        f"How many passengers in year {2000 + i}?" for i in range(1, MAX_SUB_QUESTIONS + 1)]

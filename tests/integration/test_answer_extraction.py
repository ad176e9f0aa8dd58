"""An end-to-end evaluation scored through the two-step answer extraction protocol, on the
generated report asked through the graph.
"""

from __future__ import annotations

from conftest import ANSWER_PAGE, HYDE, QUESTION, _Prompts, scripted
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from docrefrag.graph.context import AskConfig


def test_evaluation_scores_the_extracted_answer(dr, report, tmp_path):
    """The official two-step protocol: the extractor continues the prefilled "Question/Analysis" turn
    after the benchmark's prompt; its "Extracted answer" is scored, an unparseable reply scores 0."""
    from docrefrag.evals.answers import evaluate_answers, summarise
    from docrefrag.evals.datasets import Question
    from docrefrag.evals.extraction import EXTRACTION_PROMPT
    from docrefrag.indexes.hybrid import HybridSearcher

    doc_id = report[1]
    questions = [Question(f"q{i}", "mmlongbench", "transit-review.pdf", QUESTION, "4812", "Int", (ANSWER_PAGE,),
                          ("Table",))
                 for i in (1, 2)]
    reply = "Northfield reported 4,812 passengers in 2019."
    llm, _ = scripted(HYDE, reply, "Yes", HYDE, reply, "Yes")
    extractor = GenericFakeChatModel(messages=iter([AIMessage("Extracted answer: 4812\nAnswer format: Integer"),
                                                    AIMessage("I cannot tell.")]))
    seen = _Prompts()
    extractor.callbacks = [seen]
    rows = evaluate_answers(dr.open_store(), HybridSearcher(dr.open_store(), dr.embedder), llm, questions,
                            {"transit-review.pdf": doc_id}, tmp_path / "answers.jsonl",
                            AskConfig.of(answerer="chat", hyde="always"), show_progress=False, extractor=extractor)
    first, second = rows
    assert ((first["response"], first["pred"], first["extracted_format"], first["score"])
            == (reply, "4812", "Integer", 1.0))
    assert (second["pred"], second["score"]) == (None, 0.0)
    user, prefill = seen.calls[0]
    assert user.content == EXTRACTION_PROMPT and prefill.type == "ai"
    assert prefill.content == f"\n\nQuestion:{QUESTION}\nAnalysis:{reply}\n"
    assert first["score_without_extraction"] == 0.0
    assert summarise("mmlongbench", rows, "local")["extraction"] == (
        "two-step protocol with MMLongBench-Doc's extraction prompt, extractor local; "
        "accuracy without extraction 0.000")

"""The validation agent: is the answer supported by the evidence it cites? -> Verdict.

Two checks, averaged into the confidence: (1) lexical support, the share of the answer's words and
numbers found in the cited chunk's page text (numbers must match exactly); (2) the chat model's
judgement on the cited evidence: P(Yes) against No for a local model, its Yes/No reply otherwise.
An unanswerable answer is never "supported": it asks for another round of search while rounds
remain.
"""

from __future__ import annotations

import re

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from docrefrag.agents import prompts
from docrefrag.agents.answer import PageText, is_unanswerable
from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.schemas import Claim, Verdict
from docrefrag.indexes.bm25 import tokenize

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(text: str) -> set[str]:
    """The numbers of a text without thousands separators: "5,002" and "5002" are one number."""
    return {re.sub(r",(?=\d{3}\b)", "", n) for n in _NUMBER.findall(text)}


def lexical_support(answer: str, evidence: str) -> float:
    words = {w for w in tokenize(answer) if not w.isdigit()}  # numbers are matched whole, below
    numbers = _numbers(answer)
    if not words and not numbers:
        return 0.0
    text_words = set(tokenize(evidence))
    text_numbers = _numbers(evidence)
    found = len(words & text_words) + len(numbers & text_numbers)
    return found / (len(words) + len(numbers))


def validate(question: str, answer: str, claims: list[Claim], pages: list[PageText],
             llm: BaseChatModel | None) -> Verdict:
    if is_unanswerable(answer) or not claims:
        return Verdict(supported=False, confidence=0.0, missing="no page read states the answer")
    cited = {(c.doc_id, c.page) for claim in claims for c in claim.citations}
    evidence = "\n".join(p.text for p in pages if (p.doc_id, p.page) in cited)
    lexical = lexical_support(answer, evidence)
    scores = [lexical]
    if llm is not None:
        prompt = prompts.VALIDATE.format(evidence=evidence[:2000], question=question, answer=answer)
        if hasattr(llm, "yes_probabilities"):  # a local model: its P(Yes), not only which word wins
            scores.append(llm.yes_probabilities([prompt])[0])
        else:
            reply = invoke_llm(llm, [HumanMessage(prompt)], stop=["\n"])
            scores.append(1.0 if str(reply.content).strip().lower().startswith("yes") else 0.0)
    confidence = sum(scores) / len(scores)
    missing = "" if lexical >= 0.5 else f"the pages read do not contain {answer!r}"
    return Verdict(supported=confidence >= 0.5, confidence=round(confidence, 3), missing=missing)

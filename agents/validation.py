"""The validation agent: do the pages read support the answer? -> Verdict.

Two checks, averaged into the confidence: (1) lexical support, the share of the answer's words and
numbers found on the pages read (all of them, not only the cited one: an answer read on page 3 and
cited on page 5 is still supported; for the letter of an option the question lists, the option's text;
none for a yes or a no, which no page states word for word: the judge alone weighs it), numbers matched
across the forms pages write them in (agents/forms.py: 4,812 = 4812 = 4.812 thousand; 42% = 42 percent
= 0.42); where the question states anchors (a year, a table's number), only near a passage that states
one of them counts (`anchored_evidence`: the 2015 figure is not the 2021 sentence's figure); (2) the chat model's
judgement, asked with the prompt the answer was read from (the page that answered, word for word: the
answer agent reads one page at a time) followed by the answer and the question whether the pages state
it: P(Yes) against No for a local model, which computes only that tail (its KV cache of the answer's
prompt is reused), its Yes/No reply otherwise.
An answer whose every word and number a page read states has lexical support 1, so its confidence is at
least 0.5 whatever the judge says: with `tau` <= 0.5 (the default) a stated answer is never withheld. An
unanswerable answer is never "supported": it asks for another round of search while rounds remain.
"""

from __future__ import annotations

import re

from langchain_core.language_models import BaseChatModel

from docrefrag.agents.answer import PageText, answer_messages, is_unanswerable, page_passages
from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.forms import lexical_support, number_values, stated_claim
from docrefrag.agents.llm import is_local_model
from docrefrag.agents.schemas import Claim, Verdict

BEFORE, AFTER = 2, 5  # passages around a short one that states an anchor of the question (a heading, a caption)
LEAD_CHARS = 80  # a passage this short that is no sentence, or one ending in ":", introduces what follows it


_ANCHOR = re.compile(r"\b(?:1[89]\d\d|20\d\d)\b|\b(?:table|figure|fig\.|chart|exhibit|section)\s+(\d+)", re.IGNORECASE)


def question_anchors(question: str) -> list[float]:
    """The numbers that pin down what a question asks about: its years, and the numbers of the tables,
    figures and sections it names ("the 2021 column of Table 6" -> 2021, 6). Counts ("the top 3") are not."""
    return [float(m.group(1) or m.group(0)) for m in _ANCHOR.finditer(question)]


def anchored_evidence(question: str, pages: list[PageText]) -> str:
    """The text an answer must be stated in to be supported. Where the question has anchors (its years,
    the numbers of the tables and figures it names), the passages of the pages read that state one of
    them (a sentence, a table row with its column names) and, around a short one (a heading, a list's
    lead-in, a caption), BEFORE passages before and AFTER after: a value read from another year's
    sentence or row is not support, and pages that never state the question's year support nothing.
    Otherwise every page read."""
    anchors = set(question_anchors(question))
    if not anchors:
        return "\n".join(p.text for p in pages)
    kept: list[str] = []
    for page in pages:
        passages = page_passages(page.text)
        near = {j for i, text in enumerate(passages) if _states_anchor(text, anchors)
                for j in (range(max(0, i - BEFORE), min(len(passages), i + AFTER + 1)) if _leads(text) else [i])}
        kept += [passages[j] for j in sorted(near)]
    return "\n".join(kept)


def _states_anchor(passage: str, anchors: set[float]) -> bool:
    """Whether a passage states one of the anchors: as a number, or as digits inside a date ("as of
    31.12.2020" states 2020)."""
    return bool(anchors & number_values(passage)) or any(
        re.search(rf"(?<!\d){int(a)}(?!\d)", passage) for a in anchors if a >= 1800)


def _leads(passage: str) -> bool:
    text = passage.rstrip()
    return (text.endswith(":") or text.startswith("#")
            or (len(text) <= LEAD_CHARS and not text.endswith((".", "!", "?"))))


def validate(question: str, answer: str, claims: list[Claim], pages: list[PageText],
             llm: BaseChatModel | None, source: list[PageText] | None = None) -> Verdict:
    """The verdict on `answer`: the lexical support of what it claims (`forms.stated_claim`; none for a yes or
    a no) over every page read (`pages`), and the judge's, asked with the prompt the answer was read from
    (`source`: the pages that prompt held; all pages read if None)."""
    if is_unanswerable(answer) or not claims:
        return Verdict(supported=False, confidence=0.0, missing="no page read states the answer")
    claim = stated_claim(question, answer)
    lexical = None if claim is None else lexical_support(claim, anchored_evidence(question, pages))
    scores = [] if lexical is None else [lexical]
    if llm is not None:
        messages = answer_messages(question, source or pages, answer)  # the answer's prompt, then the question
        if is_local_model(llm):  # its P(Yes), not only which word wins
            scores.append(llm.yes_probabilities([messages])[0])
        else:
            reply = invoke_llm(llm, messages, stop=["\n"])
            scores.append(1.0 if str(reply.content).strip().lower().startswith("yes") else 0.0)
    confidence = sum(scores) / len(scores) if scores else 0.0
    if lexical is None:
        missing = "" if confidence >= 0.5 else f"the judge does not find that the pages read say {answer!r}"
    else:
        missing = "" if lexical >= 0.5 else f"the pages read do not contain {claim!r}"
    return Verdict(supported=confidence >= 0.5, confidence=round(confidence, 3), missing=missing)

"""The validation agent: do the pages read support the answer? -> Verdict.

Two checks, averaged into the confidence: (1) lexical support, the share of the answer's words and
numbers found on the pages read (all of them, not only the cited one: an answer read on page 3 and
cited on page 5 is still supported), numbers matched across the forms pages write them in
(agents/forms.py: 4,812 = 4812 = 4.812 thousand; 42% = 42 percent = 0.42); (2) the chat model's
judgement on the evidence, the cited pages first: P(Yes) against No for a local model, its Yes/No reply
otherwise. An answer whose every word and number a page read states has lexical support 1, so its
confidence is at least 0.5 whatever the judge says: with `tau` <= 0.5 (the default) a stated answer is
never withheld. An unanswerable answer is never "supported": it asks for another round of search while
rounds remain.
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from docrefrag.agents import prompts
from docrefrag.agents.answer import PageText, is_unanswerable
from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.forms import lexical_support
from docrefrag.agents.schemas import Claim, Verdict

JUDGE_CHARS = 2000  # evidence the judge reads, the cited pages first


def validate(question: str, answer: str, claims: list[Claim], pages: list[PageText],
             llm: BaseChatModel | None) -> Verdict:
    if is_unanswerable(answer) or not claims:
        return Verdict(supported=False, confidence=0.0, missing="no page read states the answer")
    cited = {(c.doc_id, c.page) for claim in claims for c in claim.citations}
    ordered = sorted(pages, key=lambda p: (p.doc_id, p.page) not in cited)  # the cited pages first
    evidence = "\n".join(p.text for p in ordered)
    lexical = lexical_support(answer, evidence)
    scores = [lexical]
    if llm is not None:
        prompt = prompts.VALIDATE.format(evidence=evidence[:JUDGE_CHARS], question=question, answer=answer)
        if hasattr(llm, "yes_probabilities"):  # a local model: its P(Yes), not only which word wins
            scores.append(llm.yes_probabilities([prompt])[0])
        else:
            reply = invoke_llm(llm, [HumanMessage(prompt)], stop=["\n"])
            scores.append(1.0 if str(reply.content).strip().lower().startswith("yes") else 0.0)
    confidence = sum(scores) / len(scores)
    missing = "" if lexical >= 0.5 else f"the pages read do not contain {answer!r}"
    return Verdict(supported=confidence >= 0.5, confidence=round(confidence, 3), missing=missing)

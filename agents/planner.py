"""The planner: a question -> retrieval intents (sub-queries, keywords, anchors, evidence types, HyDE).

Entities, numbers, visual anchors, evidence types and keywords are extracted from the question by
rules (reliable with any model); the chat model writes the HyDE passage and decomposes the question.

Decomposition asks for one sub-question per line, not for JSON: SmolLM2-135M-Instruct, the default,
produced no valid JSON decomposition for 5 of 5 dev questions even with two corrective retries
(about 18 s per question), while a line list costs one short generation (about 2 s) and is repaired
line by line: list marks and "Question:" prefixes are stripped, and a line is kept only when it is a
question, shares a content word with the original, and is new. When nothing survives, the plan keeps
the question itself as its only sub-query and says so in `notes`, never a crash.
"""

from __future__ import annotations

import logging
import re

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from docrefrag.agents import prompts
from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.schemas import EvidenceType, Plan
from docrefrag.indexes.bm25 import STOPWORDS
from docrefrag.indexes.fusion import DISAGREEMENT

logger = logging.getLogger(__name__)


def disagrees(query_disagreement: float, threshold: float = DISAGREEMENT) -> bool:
    """The gate of the "disagreement" plan modes, for the ask graph and the evaluation harness alike."""
    return query_disagreement >= threshold

_ANCHOR = re.compile(r"\b(?:table|figure|fig\.|chart|slide|page|section|appendix|exhibit)\s+[\w.\-]+", re.I)
_TITLED = re.compile(r"\b(?:the\s+)?(?:chart|figure|table|graph|slide)\s+(?:titled|named|called)\s+"
                     r"[\"“']?([^\"”'?]+)", re.I)
_NUMBER = re.compile(r"\b\d[\d,.%]*\b")
_QUOTED = re.compile(r"[\"“']([^\"”']{3,})[\"”']")
_CAPITALISED = re.compile(r"\b[A-Z][\w&\-]*(?:\s+[A-Z][\w&\-]*)*")
_EVIDENCE_WORDS: dict[EvidenceType, tuple[str, ...]] = {
    "table": ("table", "row", "column"),
    "chart": ("chart", "graph", "plot", "bar", "pie", "trend", "axis"),
    "figure": ("figure", "image", "photo", "picture", "diagram", "logo", "icon", "illustration"),
    "layout": ("page", "slide", "header", "footer", "section", "title", "layout", "color", "colour"),
}
_QUESTION_WORDS = frozenset("what which who whom whose how many much does did is are was were the a an in of".split())
_LIST_MARK = re.compile(r"^\s*(?:[-*\u2022]\s*|\d+[.):]\s*|(?:sub-?)?questions?\s*\d*\s*[:.)-]\s*)+", re.I)
MAX_SUB_QUESTIONS = 3


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if w not in STOPWORDS and w not in _QUESTION_WORDS}


def sub_questions(reply: str, question: str) -> list[str]:
    """The usable sub-questions of a decomposition reply (one per line), at most MAX_SUB_QUESTIONS."""
    words = _content_words(question)
    seen = {question.strip().lower()}
    out: list[str] = []
    for line in reply.splitlines():
        text = _LIST_MARK.sub("", line).strip().strip('"')
        if not text.endswith("?") or not (_content_words(text) & words) or text.lower() in seen:
            continue
        seen.add(text.lower())
        out.append(text)
    return out[:MAX_SUB_QUESTIONS]


def extract_intents(question: str) -> Plan:
    """Everything of the plan that rules can extract from the question text."""
    lowered = question.lower()
    anchors = [m.group(0).strip(" ?.") for m in _ANCHOR.finditer(question)]
    anchors += [m.group(0).strip(" ?.") for m in _TITLED.finditer(question)]
    entities = [m.group(1).strip() for m in _QUOTED.finditer(question)]
    entities += [m.group(0) for m in _CAPITALISED.finditer(question)
                 if m.group(0).lower() not in _QUESTION_WORDS and m.start() > 0]
    entities += _NUMBER.findall(question)
    types: list[EvidenceType] = [t for t, words in _EVIDENCE_WORDS.items()
                                 if any(re.search(rf"\b{w}", lowered) for w in words)]
    keywords = [w for w in re.findall(r"\w+", lowered) if w not in STOPWORDS and w not in _QUESTION_WORDS]
    return Plan(sub_queries=[question], keywords=list(dict.fromkeys(keywords)), entities=list(dict.fromkeys(entities)),
                visual_anchors=list(dict.fromkeys(anchors)), evidence_types=types or ["text"])


def plan_question(question: str, llm: BaseChatModel | None, decompose: bool = True,
                  hyde: bool = True) -> tuple[Plan, list[str]]:
    """(plan, notes): rule-based intents, plus LLM sub-queries and HyDE passage when asked for."""
    plan = extract_intents(question)
    notes: list[str] = []
    if llm is not None and decompose:
        plan.sub_queries, notes = decompose_question(question, llm)
    if llm is not None and hyde:
        plan.hyde = write_hyde(question, llm)
    return plan, notes


def decompose_question(question: str, llm: BaseChatModel) -> tuple[list[str], list[str]]:
    """(sub-queries, notes): the question itself first, then the usable sub-questions the chat model wrote."""
    reply = str(invoke_llm(llm, [HumanMessage(prompts.DECOMPOSE.format(question=question))], stop=["\n\n"]).content)
    queries = sub_questions(reply, question)
    if queries or question.strip().lower() in reply.lower():  # a repeat of the question: one fact, nothing to note
        return [question, *queries], []
    return [question], [f"decomposition gave no usable sub-question, searching with the question itself "
                        f"(the reply began {reply[:120]!r})"]


def write_hyde(question: str, llm: BaseChatModel) -> str:
    """A hypothetical passage of the page that answers `question` (HyDE), for the dense branch."""
    reply = invoke_llm(llm, [HumanMessage(prompts.HYDE.format(question=question))], stop=["\n\n"])
    return str(reply.content).strip()[:600]

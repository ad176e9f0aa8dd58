"""The planner: a question -> retrieval intents (sub-queries, keywords, anchors, evidence types, HyDE).

Entities, numbers, visual anchors, evidence types and keywords are extracted from the question by
rules (reliable with any model); the chat model writes the HyDE passage and decomposes the question.
A malformed LLM output is retried by `agents.llm.structured`; if it still fails, the plan keeps the
question itself as its only sub-query and says so in `notes`, never a crash.
"""

from __future__ import annotations

import logging
import re

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from agents import prompts
from agents.llm import LLMOutputError, invoke_llm, structured
from agents.schemas import Decomposition, EvidenceType, Plan
from indexes.bm25 import STOPWORDS

logger = logging.getLogger(__name__)

_ANCHOR = re.compile(r"\b(?:table|figure|fig\.|chart|slide|page|section|appendix|exhibit)\s+[\w.\-]+", re.I)
_TITLED = re.compile(r"\b(?:the\s+)?(?:chart|figure|table|graph|slide)\s+(?:titled|named|called)\s+[\"“']?([^\"”'?]+)", re.I)
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


def extract_intents(question: str) -> Plan:
    """Everything of the plan that rules can extract from the question text."""
    lowered = question.lower()
    anchors = [m.group(0).strip(" ?.") for m in _ANCHOR.finditer(question)]
    anchors += [m.group(0).strip(" ?.") for m in _TITLED.finditer(question)]
    entities = [m.group(1).strip() for m in _QUOTED.finditer(question)]
    entities += [m.group(0) for m in _CAPITALISED.finditer(question)
                 if m.group(0).lower() not in _QUESTION_WORDS and m.start() > 0]
    entities += _NUMBER.findall(question)
    types: list[EvidenceType] = [t for t, words in _EVIDENCE_WORDS.items() if any(re.search(rf"\b{w}", lowered) for w in words)]
    keywords = [w for w in re.findall(r"\w+", lowered) if w not in STOPWORDS and w not in _QUESTION_WORDS]
    return Plan(sub_queries=[question], keywords=list(dict.fromkeys(keywords)), entities=list(dict.fromkeys(entities)),
                visual_anchors=list(dict.fromkeys(anchors)), evidence_types=types or ["text"])


def plan_question(question: str, llm: BaseChatModel | None, decompose: bool = True, hyde: bool = True) -> tuple[Plan, list[str]]:
    """(plan, notes): rule-based intents, plus LLM sub-queries and HyDE passage when asked for."""
    plan = extract_intents(question)
    notes: list[str] = []
    if llm is not None and decompose:
        try:
            sub = structured(llm, Decomposition, [HumanMessage(prompts.DECOMPOSE.format(question=question))])
            queries = [q.strip() for q in sub.sub_queries if q.strip()]
            if queries:
                plan.sub_queries = list(dict.fromkeys([question, *queries]))[:4]
        except LLMOutputError as e:
            notes.append(f"decomposition failed, searching with the question itself ({e})")
    if llm is not None and hyde:
        reply = invoke_llm(llm, [HumanMessage(prompts.HYDE.format(question=question))], stop=["\n\n"])
        plan.hyde = str(reply.content).strip()[:600]
    return plan, notes

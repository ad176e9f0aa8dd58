"""The meta-agent of `docrefrag evolve`: it reads the retrieval agent's failed trajectories, calls the same
tools to test why the answer's page was missed, and rewrites the agent's instructions.

Per failure (a question whose evidence page was not among the pages handed to the answer agent) the
meta-agent first probes: the tool-using loop of agents/tool_agent.py with instructions to find the missed
page (META_PROBE), so its hypotheses are tested against the real tools; each probe call is marked with
whether its top results held the evidence page. Then it states one lesson (META_DIAGNOSE). The other
diagnosis, `measure`, asks no model: it runs every search tool with the question and with its key words
and states which ranked the missed page first (a measured lesson, where a small model's may be wrong). The rewrite
(META_REWRITE) gets the current instructions, the lessons and the tool-use statistics, and returns at most
MAX_CHARS of numbered rules; a rewrite that names none of the tools is refused (RewriteError), as nothing
in it could steer the agent. The rewrite without a model, `rule_rewrite`, writes the measured probes' best
search as the first rule from a template: a 1.5B meta-agent restated the seed even when told the lesson.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool

from docrefrag.agents import prompts
from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.llm import is_local_model
from docrefrag.agents.tool_agent import QUERY_KINDS, find_pages, first_rule, query_of, run_tool

MAX_CHARS = 1200  # of rewritten instructions
PROBE_TOP = 3  # a probe "finds" the evidence page when it is among the call's first pages
SEARCH_TOOLS = ("search_pages", "bm25_search", "visual_search")  # probed by `measure`
_LESSON = re.compile(r"^\s*(?:lesson\s*:\s*)", re.IGNORECASE)
_FENCE = re.compile(r"```\w*")
_RULE = re.compile(r"\s*\d+[.)]\s")


class RewriteError(ValueError):
    """The meta-agent's rewrite cannot be used as instructions."""


@dataclass(frozen=True)
class Failure:
    """A question the agent failed: what it did and where the answer was."""

    question: str
    doc_id: str
    evidence: list[int]  # 1-based pages that hold the answer
    handed: list[int]  # pages the agent handed to the answer agent
    calls: list[dict]  # its traced calls (tool_agent.Call.summary)


@dataclass(frozen=True)
class Diagnosis:
    question: str
    lesson: str
    probes: list[dict]  # the probe calls: tool, args, pages, found (the evidence page among the first PROBE_TOP)

    @property
    def probe_found(self) -> bool:
        return any(p["found"] for p in self.probes)


def _call_line(call: dict) -> str:
    if call["malformed"]:
        return f"(a malformed reply: {call['digest'][:100]})"
    args = ", ".join(f"{k}={v!r}" for k, v in call["args"].items() if k != "doc")
    pages = [p[1] for p in call["pages"][:5]]
    return f"{call['tool']}({args}) -> pages {pages or 'none'}"


def _pages(pages: Sequence[int]) -> str:
    return " or ".join(str(p) for p in pages)


def _long(llm: BaseChatModel) -> dict:
    """Per-call arguments for a reply longer than the local model's default (a rewrite)."""
    return {"max_new_tokens": 320} if is_local_model(llm) else {}


def diagnose(failure: Failure, instructions: str, tools: Sequence[BaseTool], llm: BaseChatModel,
             probes: int = 2) -> Diagnosis:
    """Probe the tools for the missed page (at most `probes` calls), then state one lesson."""
    evidence = _pages(failure.evidence)
    probe = find_pages(failure.question, tools, llm, prompts.META_PROBE.format(evidence=evidence), probes,
                       [failure.doc_id])
    tried = [c.summary() for c in probe.calls if not c.malformed and not c.fallback]
    for c in tried:
        c["found"] = any(p[1] in failure.evidence for p in c["pages"][:PROBE_TOP]) or any(
            p[1] in failure.evidence for p in c["opened"])
    probe_lines = "\n".join(f"{_call_line(c)}{' (found it)' if c['found'] else ''}" for c in tried) or "none"
    reply = invoke_llm(llm, [HumanMessage(prompts.META_DIAGNOSE.format(
        instructions=instructions, question=failure.question,
        calls="\n".join(_call_line(c) for c in failure.calls) or "none", evidence=evidence,
        handed=failure.handed or "none", probes=probe_lines))], stop=["\n"])
    lesson = _LESSON.sub("", str(reply.content).strip()).strip()
    return Diagnosis(failure.question, lesson, tried)


def measure(failure: Failure, tools: Sequence[BaseTool]) -> Diagnosis:
    """The diagnosis without a model: each search tool (SEARCH_TOOLS) probed with the question and with its
    key words (the planner's rules); the lesson names the probes whose first PROBE_TOP pages held the missed
    page, best rank first, or says that none did."""
    queries: dict[str, str] = {}
    for kind in QUERY_KINDS:
        queries.setdefault(query_of(kind, failure.question), kind)
    probes = []
    for tool in (t for t in tools if t.name in SEARCH_TOOLS):
        for query, kind in queries.items():
            call = run_tool(tool, {"query": query, "doc": failure.doc_id}).summary()
            ranks = [i for i, p in enumerate(call["pages"], 1) if p[1] in failure.evidence]
            probes.append({**call, "query_kind": kind, "found": bool(ranks) and ranks[0] <= PROBE_TOP,
                           "rank": ranks[0] if ranks else None})
    found = sorted((p for p in probes if p["found"]), key=lambda p: p["rank"])
    if found:
        lesson = "; ".join(f"{p['tool']} with the query {p['args']['query']!r} ranks page {_pages(failure.evidence)} "
                           f"at {p['rank']}" for p in found[:2])
    else:
        lesson = (f"no search with the question or its key words ranks page {_pages(failure.evidence)} in the first "
                  f"{PROBE_TOP}; other words, read_page or list_sections are needed")
    return Diagnosis(failure.question, f"For {failure.question!r}: {lesson}.", probes)


def rewrite(instructions: str, diagnoses: Sequence[Diagnosis], usage: str, tool_names: Sequence[str],
            llm: BaseChatModel, temperature: float | None = None) -> str:
    """New instructions from the current ones, the lessons and the tool-use statistics."""
    lessons = "\n".join(f"- {d.lesson}" + (" (a test call found the page)" if d.probe_found else "")
                        for d in diagnoses if d.lesson) or "- (none stated)"
    kwargs = _long(llm) | ({"temperature": temperature} if temperature else {})
    reply = invoke_llm(llm, [HumanMessage(prompts.META_REWRITE.format(
        instructions=instructions, tools=", ".join(tool_names), lessons=lessons, usage=usage))], **kwargs)
    return clean_rewrite(str(reply.content), tool_names)


def rule_rewrite(instructions: str, diagnoses: Sequence[Diagnosis]) -> str:
    """The instructions with the measured diagnoses' best search as their first rule, from a template: the
    (tool, query kind) whose probes ranked the missed page in the first PROBE_TOP for the most failures (then
    the better mean rank). It replaces the rules that say what to call first; the other rules follow,
    renumbered. RewriteError when no probe found a missed page, or the best search is already the first rule."""
    found: dict[tuple[str, str], list[int]] = {}
    for d in diagnoses:
        for p in d.probes:
            if p["found"] and "query_kind" in p:
                found.setdefault((p["tool"], p["query_kind"]), []).append(p["rank"])
    if not found:
        raise RewriteError("no measured probe found a missed page: no search to write as a rule")
    tool, kind = max(found, key=lambda k: (len(found[k]), -sum(found[k]) / len(found[k])))
    first = first_rule(tool, kind, f"on the questions missed before, that search ranked the answer's page in its "
                                   f"first {PROBE_TOP}.")
    lines = [line.strip() for line in instructions.splitlines() if line.strip()]
    rules = [_RULE.sub("", line, count=1) for line in lines if _RULE.match(line)]
    if rules and rules[0] == first:
        raise RewriteError(f"the measured best search ({tool} with {kind}) is already the first rule")
    kept = [first, *(r for r in rules if not r.lower().startswith("first "))]
    lead = [line for line in lines if not _RULE.match(line)]
    return "\n".join([*lead, *(f"{i}. {r}" for i, r in enumerate(kept, 1))])


def clean_rewrite(text: str, tool_names: Sequence[str]) -> str:
    """The rewrite's numbered rules (all its lines if it numbers none) without code fences, at most MAX_CHARS
    (whole lines); RewriteError when it names no tool. Only the rules: the 1.5B decoder went on after them
    with the prompt's lessons, one of them a training question verbatim."""
    raw = [line.rstrip() for line in _FENCE.sub("", text).strip().splitlines()]
    rules = [line for line in raw if _RULE.match(line)]
    lines, total = [], 0
    for line in rules or raw:
        if total + len(line) + 1 > MAX_CHARS:
            break
        lines.append(line)
        total += len(line) + 1
    cleaned = "\n".join(lines).strip()
    if not any(name in cleaned for name in tool_names):
        raise RewriteError(f"the rewrite names none of the tools ({', '.join(tool_names)}): {cleaned[:200]!r}")
    return cleaned

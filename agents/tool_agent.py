"""The tool-using retrieval agent (`AskConfig.search.retrieval = "agent"`): the chat model calls the tool
registry's tools step by step, following the store's active instructions, and hands the pages it found
to the answer agent.

Each step the model sees its instructions, the tools (name, arguments, first line of the description),
the question and every earlier call with a digest of its result, and replies with one call. A chat
model that supports LangChain tool calling (`bind_tools`) replies with a native tool call; any other
(the local decoder) replies with one JSON object `{"name": TOOL, "arguments": {...}}` (the form Qwen2.5
was trained on for tool calls), parsed leniently (code fences, `<tool_call>` tags, text around the
object). A reply that names no tool, an unknown tool or wrong arguments is answered with what was wrong
and retried (at most MAX_RETRIES in a row, then the agent stops): never an exception. A call the model
already made (same tool, same arguments) ends the exploration: its result would be the same (the local
1.5B decoder, left alone, repeated its first search until the step budget ran out). A tool's own error
(an unknown page, a bad node id) comes back as its result text, for the model to correct.

A first rule written in the template form `first_rule` writes ("1. First call bm25_search with the whole
question as the query: ...", what `docrefrag evolve --diagnosis rules` writes) is executed by the agent's
code before the model's first reply, and the model sees it as its own first call: the 1.5B agent called
`search_pages` whatever rule 1 named, so a rule it will not follow is followed for it (`ruled_call`).

Pages: a tool result that is JSON names pages by objects with "page" (and "doc_id"); a call whose
arguments name a page (read_page) opened it. A team's tool that finds pages returns JSON hits of that
shape to take part. Pages are ranked by reciprocal rank summed over the calls that named them, an opened
page counting as a top hit once more. An exploration that found no page in scope searches the question
with `search_pages` (the trace says so), so the answer agent always gets pages when the store has any.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import ValidationError

from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.planner import extract_intents
from docrefrag.indexes.fusion import RRF_K

logger = logging.getLogger(__name__)

FINISH = "finish"
MAX_RETRIES = 2  # malformed replies in a row after which the agent stops
DIGEST_HITS = 5  # hits of a search result shown to the model
DIGEST_CHARS = 600  # characters of any other result shown to the model
_FENCE = re.compile(r"</?tool_call>|```(?:json)?", re.IGNORECASE)
_FIRST_SENTENCE = re.compile(r".*?(?:[.;](?=\s)|$)")

CALL_FORMAT = ('Reply with one JSON object and nothing else: {"name": "<tool>", "arguments": {"<argument>": <value>}}. '
               f'When the pages found so far answer the question, reply {{"name": "{FINISH}", "arguments": {{}}}}.')


class BadCall(ValueError):
    """A reply that is not a usable tool call; the message says what to do instead."""


@dataclass
class Call:
    tool: str  # "" for a malformed reply
    args: dict
    digest: str  # what the model was shown of the result (for a malformed reply: what was wrong)
    pages: list[tuple[str, int]] = field(default_factory=list)  # pages the result named, in its order
    opened: list[tuple[str, int]] = field(default_factory=list)  # pages the call's arguments named (read_page)
    snippets: dict[tuple[str, int], str] = field(default_factory=dict)
    malformed: bool = False
    fallback: bool = False  # made by the agent's code (nothing found), not chosen by the model
    ruled: bool = False  # made by the agent's code as the instructions' first rule says (`ruled_call`)

    def summary(self) -> dict:
        """The trace's record of the call."""
        return {"tool": self.tool, "args": self.args, "digest": self.digest[:300], "malformed": self.malformed,
                "fallback": self.fallback, "ruled": self.ruled, "pages": [list(p) for p in self.pages[:10]],
                "opened": [list(p) for p in self.opened]}


@dataclass
class Exploration:
    calls: list[Call]
    pages: list[tuple[str, int, float]]  # (doc_id, page, score), best first
    snippets: dict[tuple[str, int], str]
    stopped: str  # "finish", "steps" (the step budget), "repeat" (a call made before) or "malformed" (MAX_RETRIES
    # bad replies in a row)


def finish_tool() -> BaseTool:
    def finish() -> str:
        """Stop searching: the pages found so far are handed to the answer agent."""
        return "finished"

    return StructuredTool.from_function(finish)


def tool_catalogue(tools: Sequence[BaseTool]) -> str:
    """One line per tool: name(argument: type = default): the first sentence of its description."""
    lines = []
    for tool in tools:
        args = []
        for name, schema in tool.args.items():
            kinds = [s.get("type") for s in schema.get("anyOf", []) if s.get("type") != "null"]
            kind = schema.get("type") or next(iter(kinds), "any")
            args.append(f"{name}: {kind}" + (f" = {json.dumps(schema['default'])}" if "default" in schema else ""))
        description = _FIRST_SENTENCE.match(" ".join((tool.description or "").split()))[0].rstrip(";")
        lines.append(f"- {tool.name}({', '.join(args)}): {description}")
    return "\n".join(lines)


def _first_object(text: str) -> str:
    """The first balanced {...} of `text` (strings respected)."""
    start = text.find("{")
    if start < 0:
        raise BadCall('the reply holds no JSON object; ' + CALL_FORMAT)
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text[start:], start):
        if in_string:
            escaped = ch == "\\" and not escaped
            in_string = not (ch == '"' and not escaped)
            continue
        if ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    raise BadCall("the reply's JSON object is not closed; " + CALL_FORMAT)


def parse_call(text: str, tools: dict[str, BaseTool]) -> tuple[str, dict]:
    """(tool name, arguments) of a text reply; BadCall says what was wrong."""
    try:
        obj = json.loads(_first_object(_FENCE.sub("", text)))
    except json.JSONDecodeError as e:
        raise BadCall(f"the reply's JSON is not valid ({e.msg}); " + CALL_FORMAT) from None
    name = obj.get("name") or obj.get("tool")
    args = obj.get("arguments", obj.get("args", {}))
    if isinstance(args, str):  # OpenAI-style arguments as a JSON string
        try:
            args = json.loads(args or "{}")
        except json.JSONDecodeError:
            raise BadCall(f"the arguments of {name!r} are not a JSON object; " + CALL_FORMAT) from None
    if not isinstance(name, str) or not name:
        raise BadCall('the reply names no tool ("name"); ' + CALL_FORMAT)
    if name == FINISH:
        return name, {}
    if name not in tools:
        raise BadCall(f"there is no tool {name!r}; the tools are {', '.join([*tools, FINISH])}")
    if not isinstance(args, dict):
        raise BadCall(f'the arguments of {name} must be a JSON object, e.g. {{"query": "..."}}')
    return name, args


def _check_args(tool: BaseTool, args: dict) -> dict:
    """The arguments validated by the tool's schema; BadCall names what is missing or wrong."""
    schema = tool.get_input_schema()
    try:
        schema.model_validate(args)
    except ValidationError as e:  # missing or mistyped arguments
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        raise BadCall(f"{tool.name}: {where}: {first['msg']}; its arguments are {', '.join(tool.args)}") from None
    unknown = sorted(set(args) - set(tool.args))
    if unknown:
        raise BadCall(f"{tool.name} takes no argument {', '.join(unknown)}; its arguments are {', '.join(tool.args)}")
    return args


def _scoped(tool: BaseTool, args: dict, scope: Sequence[str] | None) -> dict:
    """A question asked over one document: the tool's `doc` argument defaults to it."""
    if scope and len(scope) == 1 and "doc" in tool.args and not args.get("doc"):
        return {**args, "doc": scope[0]}
    return args


def _hit_rows(value: object) -> list[dict]:
    """The objects with a "page" in a JSON result (a list of hits, an object with a list of elements)."""
    if isinstance(value, dict):
        rows = [value] if isinstance(value.get("page"), int) else []
        return rows + [r for v in value.values() if isinstance(v, (list, dict)) for r in _hit_rows(v)]
    if isinstance(value, list):
        return [r for v in value for r in _hit_rows(v)]
    return []


def run_tool(tool: BaseTool, args: dict) -> Call:
    """Call a tool; the pages its result names and the digest the model is shown."""
    result = str(tool.invoke(args))
    try:
        rows = _hit_rows(json.loads(result))
    except json.JSONDecodeError:
        rows = []
    doc = args.get("doc")
    named = [((r.get("doc_id") or doc, r["page"]), str(r.get("snippet") or r.get("text") or "")) for r in rows
             if r.get("doc_id") or doc]
    pages = list(dict.fromkeys(key for key, _ in named))
    snippets = {key: text[:200] for key, text in named}
    opened = [(doc, args["page"])] if doc and isinstance(args.get("page"), int) else []
    if rows:
        digest = "\n".join(f"page {r['page']}" + (f" ({r['kind']})" if "kind" in r else "")
                           + (f", score {r['score']}" if "score" in r else "") + ": "
                           + str(r.get("snippet") or r.get("text") or "").replace("\n", " ")[:100]
                           for r in rows[:DIGEST_HITS])
    else:
        digest = result[:DIGEST_CHARS]
    return Call(tool.name, args, digest or "(nothing found)", pages, opened, snippets)


def rank_pages(calls: Sequence[Call], scope: Sequence[str] | None) -> list[tuple[str, int, float]]:
    """Pages by reciprocal rank summed over the calls that named them (an opened page: once more as a top hit);
    pages outside the question's documents are dropped."""
    scores: dict[tuple[str, int], float] = {}
    for call in calls:
        for rank, key in enumerate(call.pages):
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank + 1)
        for key in call.opened:
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + 1)
    kept = [k for k in scores if not scope or k[0] in scope]
    return [(doc, page, scores[(doc, page)]) for doc, page in sorted(kept, key=lambda k: -scores[k])]


def _bound(llm: BaseChatModel, tools: Sequence[BaseTool]):
    """The model with native tool calling, or None when it has none (then the JSON text protocol)."""
    try:
        return llm.bind_tools(list(tools))
    except NotImplementedError:
        return None


def _reply(llm: BaseChatModel, bound, messages: list[BaseMessage]) -> tuple[BaseMessage, str | None, str]:
    """The model's next reply (a native call kept alone), its tool-call id (None: a text reply) and the call as
    text for `parse_call`."""
    reply = invoke_llm(bound if bound is not None else llm, messages)
    if bound is not None and reply.tool_calls:
        first = reply.tool_calls[0]
        return (AIMessage(str(reply.content), tool_calls=[first]), first.get("id"),
                json.dumps({"name": first["name"], "arguments": first["args"]}))
    return reply, None, str(reply.content)


def _observe(messages: list[BaseMessage], reply: BaseMessage, call_id: str | None, name: str, text: str) -> None:
    """Append the model's call and what came of it to the conversation."""
    if call_id is not None:
        messages += [reply, ToolMessage(text, tool_call_id=call_id)]
    else:
        messages += [AIMessage(str(reply.content).strip()), HumanMessage(f"Result of {name or 'your reply'}:\n{text}")]


QUERY_KINDS = ("the whole question", "the question's key words")
_FIRST_RULE = re.compile(rf"^\s*1[.)]\s*First call (\w+) with ({'|'.join(QUERY_KINDS)}) as the query", re.MULTILINE)


def first_rule(tool: str, kind: str, why: str) -> str:
    """A first rule in the form `ruled_call` executes: which search to call first, with which query."""
    return f"First call {tool} with {kind} as the query: {why}"


def key_words(question: str) -> str:
    """The question's entities and key words (the planner's rules), each word once as first spelled."""
    plan = extract_intents(question)
    words: dict[str, str] = {}
    for word in " ".join([*plan.entities, *plan.keywords]).split():
        words.setdefault(word.lower(), word)
    return " ".join(words.values()) or question


def query_of(kind: str, question: str) -> str:
    """The query of a QUERY_KINDS kind for `question`."""
    return question if kind == QUERY_KINDS[0] else key_words(question)


def ruled_call(instructions: str, question: str, tools: dict[str, BaseTool]) -> tuple[str, dict] | None:
    """The call the instructions' first rule prescribes, where it is written in `first_rule`'s form and names a
    registered tool; None otherwise."""
    m = _FIRST_RULE.search(instructions)
    if m is None or m.group(1) not in tools:
        return None
    return m.group(1), {"query": query_of(m.group(2), question)}


def find_pages(question: str, tools: Sequence[BaseTool], llm: BaseChatModel, instructions: str, steps: int,
            scope: Sequence[str] | None, context: str = "") -> Exploration:
    """Let the model call tools (at most `steps` calls) to find the pages that answer `question`."""
    by_name = {t.name: t for t in tools}
    offered = [*tools, finish_tool()]
    bound = _bound(llm, offered)
    system = f"{instructions.strip()}\n\nTools (one call per reply):\n{tool_catalogue(offered)}"
    if bound is None:
        system += f"\n\n{CALL_FORMAT}"
    ask = f"Question: {question}" + (f"\n{context}" if context else "")
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(ask)]
    calls: list[Call] = []
    ruled = ruled_call(instructions, question, by_name)
    if ruled is not None:
        name, args = ruled
        call = run_tool(by_name[name], _check_args(by_name[name], _scoped(by_name[name], args, scope)))
        call.ruled = True
        calls.append(call)
        _observe(messages, AIMessage(json.dumps({"name": name, "arguments": args})), None, name, call.digest)
    stopped, bad = "steps", 0
    while sum(not c.malformed for c in calls) < steps:
        reply, call_id, text = _reply(llm, bound, messages)
        try:
            name, args = parse_call(text, by_name)
            if name == FINISH:
                stopped = "finish"
                break
            args = _check_args(by_name[name], _scoped(by_name[name], args, scope))
        except BadCall as e:
            bad += 1
            calls.append(Call("", {}, str(e), malformed=True))
            _observe(messages, reply, call_id, "", f"Not a usable call: {e}")
            if bad > MAX_RETRIES:
                stopped = "malformed"
                break
            continue
        bad = 0
        if any(c.tool == name and c.args == args for c in calls):  # the same result again: nothing left to learn
            stopped = "repeat"
            break
        call = run_tool(by_name[name], args)
        calls.append(call)
        _observe(messages, reply, call_id, name, call.digest)
    pages = rank_pages(calls, scope)
    if not pages and "search_pages" in by_name:
        fallback = run_tool(by_name["search_pages"], _scoped(by_name["search_pages"], {"query": question}, scope))
        fallback.fallback = True
        calls.append(fallback)
        pages = rank_pages(calls, scope)
    snippets = {k: v for c in calls for k, v in c.snippets.items() if v}
    return Exploration(calls, pages, snippets, stopped)


def tool_use(calls: Sequence[dict]) -> dict:
    """Statistics of traced calls (Call.summary rows): calls per tool, malformed replies, fallbacks, and
    the sequence of tools (a combination) that the run used."""
    counts: dict[str, int] = {}
    for c in calls:
        if c["tool"]:
            counts[c["tool"]] = counts.get(c["tool"], 0) + 1
    return {"calls": counts, "malformed": sum(c["malformed"] for c in calls),
            "fallback": sum(c["fallback"] for c in calls),
            "sequence": "+".join(c["tool"] for c in calls if c["tool"] and not c["fallback"]) or "(none)"}

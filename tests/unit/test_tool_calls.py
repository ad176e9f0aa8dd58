"""The tool-using retrieval agent without a store: its call parser, its retries of malformed calls, the
step budget, native tool calls, and the pages it hands on (scripted chat models)."""

from __future__ import annotations

import json

import pytest
from conftest import scripted, tool_call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool

from docrefrag.agents.tool_agent import (
    BadCall,
    find_pages,
    first_rule,
    parse_call,
    rank_pages,
    ruled_call,
    run_tool,
    tool_use,
)


def hits_tool(pages: list[int], name: str = "lookup"):
    seen: list[dict] = []

    def lookup(query: str, doc: str | None = None) -> str:
        """Find pages for a query; returns JSON hits."""
        seen.append({"query": query, "doc": doc})
        return json.dumps([{"doc_id": doc or "a.pdf", "page": p, "snippet": f"page {p} text"} for p in pages])

    tool = StructuredTool.from_function(lookup, name=name)
    return tool, seen


def test_parse_call_reads_the_forms_a_small_model_writes():
    tool, _ = hits_tool([1])
    tools = {"lookup": tool}
    assert parse_call('```json\n{"name": "lookup", "arguments": {"query": "a {b}"}}\n```', tools) == \
        ("lookup", {"query": "a {b}"})
    tagged = '<tool_call>\n{"name": "lookup", "arguments": "{\\"query\\": \\"x\\"}"}\n</tool_call>'
    assert parse_call(tagged, tools) == ("lookup", {"query": "x"})
    wordy = 'I will search. {"tool": "lookup", "args": {"query": "y"}} done'
    assert parse_call(wordy, tools) == ("lookup", {"query": "y"})
    assert parse_call('{"name": "finish"}', tools) == ("finish", {})
    for reply, message in [("page 4 has it", "no JSON object"), ('{"name": "lookup", "arguments": {', "not closed"),
                           ('{"name": "grep", "arguments": {}}', "no tool 'grep'; the tools are lookup, finish"),
                           ('{"arguments": {"query": "x"}}', "names no tool"),
                           ('{"name": "lookup", "arguments": [1]}', "must be a JSON object"),
                           ("{'name': 'lookup'}", "not valid")]:
        with pytest.raises(BadCall, match=message):
            parse_call(reply, tools)


def test_malformed_calls_are_retried_and_the_found_pages_handed_on():
    tool, seen = hits_tool([3, 5])
    llm, prompts = scripted("page 4 please", tool_call("grep", pattern="x"),
                            tool_call("lookup", query="ferry passengers"), tool_call("lookup"), tool_call("finish"))
    found = find_pages("How many ferry passengers?", [tool], llm, "Use lookup.", steps=3, scope=["a.pdf"])
    assert found.stopped == "finish"
    assert [c.malformed for c in found.calls] == [True, True, False, True]
    assert "no JSON object" in prompts[1] and "no tool 'grep'" in prompts[2]  # each error is told to the model
    assert "lookup: query: Field required" in prompts[4]  # the missing argument is named
    assert seen == [{"query": "ferry passengers", "doc": "a.pdf"}]  # the question's one document filled in
    assert [(d, p) for d, p, _ in found.pages] == [("a.pdf", 3), ("a.pdf", 5)]
    assert found.snippets[("a.pdf", 3)] == "page 3 text"
    stats = tool_use([c.summary() for c in found.calls])
    assert stats == {"calls": {"lookup": 1}, "malformed": 3, "fallback": 0, "sequence": "lookup"}
    llm, _ = scripted("no", "still no", "nope", tool_call("lookup", query="x"))  # 3 bad replies in a row: stopped
    assert find_pages("q", [tool], llm, "i", steps=3, scope=["a.pdf"]).stopped == "malformed"


def test_too_many_malformed_replies_stop_the_agent_and_the_question_is_searched():
    tool, seen = hits_tool([2], name="search_pages")
    llm, _ = scripted("no", "still no", "nope")
    found = find_pages("Which page?", [tool], llm, "Search.", steps=4, scope=None)
    assert found.stopped == "malformed"
    assert found.calls[-1].fallback and seen == [{"query": "Which page?", "doc": None}]
    assert [(d, p) for d, p, _ in found.pages] == [("a.pdf", 2)]


def test_a_repeated_call_ends_the_exploration():
    tool, seen = hits_tool([3])
    llm, _ = scripted(tool_call("lookup", query="x"), tool_call("lookup", query="x"), tool_call("lookup", query="y"))
    found = find_pages("q", [tool], llm, "i", steps=3, scope=["a.pdf"])
    assert found.stopped == "repeat" and len(found.calls) == 1 and len(seen) == 1


def test_the_step_budget_bounds_the_calls_and_opened_pages_rank_first():
    tool, _ = hits_tool([7, 8, 9])

    def read_page(doc: str, page: int) -> str:
        """The markdown of one page."""
        return f"# page {page}"

    reader = StructuredTool.from_function(read_page)
    llm, _ = scripted(tool_call("lookup", query="x"), tool_call("read_page", page=9), tool_call("lookup", query="y"))
    found = find_pages("q", [tool, reader], llm, "i", steps=2, scope=["a.pdf"])
    assert found.stopped == "steps" and len(found.calls) == 2
    assert found.pages[0][:2] == ("a.pdf", 9)  # read: counted once more as a top hit
    assert rank_pages(found.calls, scope=["b.pdf"]) == []  # pages of other documents are dropped


def test_a_first_rule_in_the_template_form_is_executed_before_the_model_replies():
    tool, seen = hits_tool([4], name="bm25_search")
    rules = f"Find pages.\n1. {first_rule('bm25_search', 'the whole question', 'it ranked them first.')}\n2. Finish."
    assert ruled_call(rules, "How many buses ran?", {"bm25_search": tool}) == (
        "bm25_search", {"query": "How many buses ran?"})
    assert ruled_call(rules.replace("bm25_search", "grep"), "q", {"bm25_search": tool}) is None  # no such tool
    assert ruled_call("1. Search first.", "q", {"bm25_search": tool}) is None
    llm, prompts = scripted('{"name": "finish"}')
    found = find_pages("How many buses ran?", [tool], llm, rules, steps=3, scope=["a.pdf"])
    assert [c.ruled for c in found.calls] == [True] and found.stopped == "finish"
    assert seen == [{"query": "How many buses ran?", "doc": "a.pdf"}] and found.pages[0][:2] == ("a.pdf", 4)
    assert "Result of bm25_search" in prompts[-1]  # the model saw the call as its own
    keywords = ruled_call(rules.replace("the whole question", "the question's key words"),
                          "How many buses did Northfield run in 2019?", {"bm25_search": tool})
    assert keywords == ("bm25_search", {"query": "Northfield 2019 buses run"})


class ToolCallingModel(GenericFakeChatModel):
    """A chat model with native tool calls (as ChatOpenAI): bind_tools accepted, replies are tool calls."""

    def bind_tools(self, tools, **kwargs):
        self.__dict__["bound"] = [t.name for t in tools]
        return self


def test_a_model_with_native_tool_calls_is_driven_by_them():
    tool, seen = hits_tool([4])
    replies = iter([AIMessage("", tool_calls=[{"name": "lookup", "args": {"query": "q1"}, "id": "c1"}]),
                    AIMessage("", tool_calls=[{"name": "finish", "args": {}, "id": "c2"}])])
    llm = ToolCallingModel(messages=replies)
    found = find_pages("q", [tool], llm, "i", steps=3, scope=None)
    assert llm.__dict__["bound"] == ["lookup", "finish"]
    assert found.stopped == "finish" and seen == [{"query": "q1", "doc": None}]


def test_run_tool_digests_hits_and_text():
    tool, _ = hits_tool([1, 2])
    hit_call = run_tool(tool, {"query": "x"})
    assert hit_call.digest.splitlines() == ["page 1: page 1 text", "page 2: page 2 text"]
    text = StructuredTool.from_function(lambda doc, page: "word " * 500, name="read_page",
                                        description="The markdown of one page.")
    read = run_tool(text, {"doc": "a.pdf", "page": 3})
    assert read.opened == [("a.pdf", 3)] and len(read.digest) <= 600
    assert isinstance(ToolMessage("x", tool_call_id="1").content, str)



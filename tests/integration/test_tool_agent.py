"""The tool-using retrieval agent: its call parser, its retries of malformed calls, native tool calls,
the pages it hands on, and `ask --retrieval agent` calling a team's tool registered by package path."""

from __future__ import annotations

import json

import pytest
from conftest import ANSWER_PAGE, QUESTION, entries, nodes_of, scripted
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool

from docrefrag.agents.tool_agent import BadCall, find_pages, parse_call, rank_pages, run_tool, tool_use
from docrefrag.graph.context import AskConfig

LEDGER_CALLS: list[str] = []


def ledger_tool(store, searcher):
    """A team's tool (a factory taking the store and the searcher): finds the passenger table's page."""

    def ledger_lookup(query: str, doc: str | None = None) -> str:
        """Look the query up in the operators' ledger; returns JSON hits (1-based pages)."""
        LEDGER_CALLS.append(query)
        return json.dumps([{"doc_id": doc or store.ready_ids()[0], "page": ANSWER_PAGE, "snippet": "operator ledger"}])

    return StructuredTool.from_function(ledger_lookup)


def hits_tool(pages: list[int], name: str = "lookup"):
    seen: list[dict] = []

    def lookup(query: str, doc: str | None = None) -> str:
        """Find pages for a query; returns JSON hits."""
        seen.append({"query": query, "doc": doc})
        return json.dumps([{"doc_id": doc or "a.pdf", "page": p, "snippet": f"page {p} text"} for p in pages])

    tool = StructuredTool.from_function(lookup, name=name)
    return tool, seen


def call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments})


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
    llm, prompts = scripted("page 4 please", call("grep", pattern="x"), call("lookup", query="ferry passengers"),
                            call("lookup"), call("finish"))
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
    llm, _ = scripted("no", "still no", "nope", call("lookup", query="x"))  # 3 bad replies in a row: stopped
    assert find_pages("q", [tool], llm, "i", steps=3, scope=["a.pdf"]).stopped == "malformed"


def test_too_many_malformed_replies_stop_the_agent_and_the_question_is_searched():
    tool, seen = hits_tool([2], name="search_pages")
    llm, _ = scripted("no", "still no", "nope")
    found = find_pages("Which page?", [tool], llm, "Search.", steps=4, scope=None)
    assert found.stopped == "malformed"
    assert found.calls[-1].fallback and seen == [{"query": "Which page?", "doc": None}]
    assert [(d, p) for d, p, _ in found.pages] == [("a.pdf", 2)]


def test_the_step_budget_bounds_the_calls_and_opened_pages_rank_first():
    tool, _ = hits_tool([7, 8, 9])

    def read_page(doc: str, page: int) -> str:
        """The markdown of one page."""
        return f"# page {page}"

    reader = StructuredTool.from_function(read_page)
    llm, _ = scripted(call("lookup", query="x"), call("read_page", page=9), call("lookup", query="y"))
    found = find_pages("q", [tool, reader], llm, "i", steps=2, scope=["a.pdf"])
    assert found.stopped == "steps" and len(found.calls) == 2
    assert found.pages[0][:2] == ("a.pdf", 9)  # read: counted once more as a top hit
    assert rank_pages(found.calls, scope=["b.pdf"]) == []  # pages of other documents are dropped


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


def test_ask_in_agent_mode_calls_a_team_tool_registered_by_package_path(dr, report):
    _, doc_id = report
    LEDGER_CALLS.clear()
    llm, _ = scripted("Let me look at the ledger.", call("ledger_lookup", query="Northfield passengers 2019"),
                      call("finish"), "4,812", "Yes")
    config = AskConfig.of(answerer="chat", retrieval="agent", agent_tools=f"{__name__}:ledger_tool", max_rounds=1,
                          memory=False)
    result = dr.ask(QUESTION, llm=llm, config=config)
    assert LEDGER_CALLS == ["Northfield passengers 2019"]
    assert nodes_of(result.trace) == ["plan", "explore", "rerank", "answer", "validate"]
    (explore,) = entries(result.trace, "explore")
    assert [c["tool"] for c in explore["calls"]] == ["", "ledger_lookup"] and explore["stopped"] == "finish"
    assert explore["calls"][0]["malformed"] and explore["instructions"] == 1
    assert explore["hits"][0]["page"] == ANSWER_PAGE
    assert result.answer == "4812"
    citation = result.claims[0]["citations"][0]
    assert (citation["doc_id"], citation["page"]) == (doc_id, ANSWER_PAGE)

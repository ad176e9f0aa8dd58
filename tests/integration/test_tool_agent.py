"""`ask --retrieval agent` end to end on the generated report: a team's tool registered by package path is
called, a malformed reply retried, the found page read and cited (a scripted chat model)."""

from __future__ import annotations

import json

from conftest import ANSWER_PAGE, QUESTION, entries, nodes_of, scripted, tool_call
from langchain_core.tools import StructuredTool

from docrefrag.graph.config import AskConfig

LEDGER_CALLS: list[str] = []


def ledger_tool(store, searcher):
    """A team's tool (a factory taking the store and the searcher): finds the passenger table's page."""

    def ledger_lookup(query: str, doc: str | None = None) -> str:
        """Look the query up in the operators' ledger; returns JSON hits (1-based pages)."""
        LEDGER_CALLS.append(query)
        return json.dumps([{"doc_id": doc or store.catalog.ready_ids()[0], "page": ANSWER_PAGE,
                            "snippet": "operator ledger"}])

    return StructuredTool.from_function(ledger_lookup)


def test_ask_in_agent_mode_calls_a_team_tool_registered_by_package_path(dr, report):
    _, doc_id = report
    LEDGER_CALLS.clear()
    llm, _ = scripted("Let me look at the ledger.", tool_call("ledger_lookup", query="Northfield passengers 2019"),
                      tool_call("finish"), "4,812", "Yes")
    config = AskConfig.of(answerer="chat", retrieval="agent", agent_tools=f"{__name__}:ledger_tool", max_rounds=1,
                          memory=False)
    result = dr.ask(QUESTION, llm=llm, config=config)
    assert LEDGER_CALLS == ["Northfield passengers 2019"]
    assert nodes_of(result.trace) == ["plan", "explore", "rerank", "answer", "validate"]
    (explore,) = entries(result.trace, "explore")
    # the seed's first rule is in the template form: its search is made for the model, then the model's calls
    assert [c["tool"] for c in explore["calls"]] == ["search_pages", "", "ledger_lookup"]
    assert explore["stopped"] == "finish" and explore["calls"][0]["ruled"] and explore["calls"][1]["malformed"]
    assert explore["instructions"] == dr.agent_instructions().version
    assert explore["hits"][0]["page"] == ANSWER_PAGE
    assert result.answer == "4812"
    citation = result.claims[0]["citations"][0]
    assert (citation["doc_id"], citation["page"]) == (doc_id, ANSWER_PAGE)

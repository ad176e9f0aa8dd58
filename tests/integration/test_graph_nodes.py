"""The ask graph's nodes and routing: when the enrich node (HyDE, sub-queries) runs, a node replaced
by a dotted path, the chat reranker's requirements, a rerank that keeps no page, and the graph's
refusal of unknown node names and bad dotted paths.
"""

from __future__ import annotations

import pytest
from conftest import HYDE, NEW_QUERY, QUESTION, entries, nodes_of, prompt_kind, retrieved_pages, scripted
from langgraph.runtime import Runtime

from docrefrag.evals.answers import first_round_hits
from docrefrag.graph.context import AskConfig, AskContext
from docrefrag.graph.graph import build_graph
from docrefrag.graph.state import AskState


def reverse_rerank(state: AskState, runtime: Runtime[AskContext]) -> dict:
    """A replacement rerank node: the retrieved pages in reverse order."""
    hits = state["hits"][::-1]
    return {"hits": hits, "trace": [{"node": "rerank", "note": "reversed", "pages": [h["page"] for h in hits]}]}


def drop_all_hits(state: AskState, runtime: Runtime[AskContext]) -> dict:
    """A replacement rerank node that keeps no page: what a search that matched nothing leaves."""
    return {"hits": [], "trace": [{"node": "rerank", "note": "dropped every page"}]}


def test_disagreeing_branches_bring_hyde_and_a_second_search(dr):
    """The default HyDE mode: the passage is written only when the question's search finds the branches'
    query disagreement at or above the threshold, then the question is searched again; once per run."""
    llm, seen = scripted("4,812", "Yes")
    # memory=False: no run stores its plan, so none seeds the next one's search (graph/memory.py)
    never = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="never", max_rounds=1, memory=False))
    assert [prompt_kind(p) for p in seen] == ["answer", "validate"]
    first = entries(never.trace, "retrieve")[0]["queries"][0]
    q = first["query_disagreement"]  # rounded to 3 decimals
    assert 0.0 <= q <= 0.98
    assert first["switched_off"] == {"sparse": 0, "dense": 0}  # no branch fails on the generated report

    llm, seen = scripted("4,812", "Yes")
    calm = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", disagreement=q + 0.01, memory=False))
    assert [prompt_kind(p) for p in seen] == ["answer", "validate"]
    assert nodes_of(calm.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]

    config = AskConfig.of(answerer="chat", disagreement=max(q - 0.01, 0.0), max_rounds=1, memory=False)
    llm, seen = scripted(HYDE, "4,812", "Yes")
    once = dr.ask(QUESTION, llm=llm, config=config, thread_id="hyde-thread")
    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]
    assert nodes_of(once.trace) == ["plan", "retrieve", "enrich", "retrieve", "rerank", "answer", "validate"]
    # the evaluation reports the pages of round 1's last search, the one the answer was chosen from
    assert [h["page"] for h in first_round_hits(once.trace)] == retrieved_pages(entries(once.trace, "retrieve")[1])
    llm, seen = scripted(HYDE, "4,812", "Yes")  # the same thread again: a new run decides afresh
    dr.ask(QUESTION, llm=llm, config=config, thread_id="hyde-thread")
    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]

    # threshold 0: every search qualifies, yet the passage is written once, in round 1 only
    llm, seen = scripted(HYDE, "Southport", "No", NEW_QUERY, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", disagreement=0.0))
    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate", "refine", "answer", "validate"]
    assert nodes_of(result.trace) == ["plan", "retrieve", "enrich", "retrieve", "rerank", "answer", "validate",
                                      "refine", "retrieve", "rerank", "answer", "validate"]
    (hyde,) = entries(result.trace, "enrich")
    assert hyde["hyde"] == HYDE and hyde["query_disagreement"] == pytest.approx(q, abs=1e-3)
    before, after, _ = entries(result.trace, "retrieve")
    assert HYDE not in before["queries"][0]["dense"] and HYDE[:100] in after["queries"][0]["dense"]
    assert before["queries"][0]["sparse"] == after["queries"][0]["sparse"]  # HyDE is for the dense branch only
    assert result.answer == "4812" and result.rounds == 2


def test_disagreeing_branches_bring_sub_queries_in_that_mode(dr):
    """decompose="disagreement" (with HyDE's default mode): on disagreement the enrich node writes the
    HyDE passage and the sub-queries, and the second search runs the question and each sub-query."""
    sub = "Which table lists the Northfield passengers?"
    llm, seen = scripted(HYDE, f"1. {sub}", "4,812", "Yes")
    config = AskConfig.of(answerer="chat", decompose="disagreement", disagreement=0.0, max_rounds=1)
    result = dr.ask(QUESTION, llm=llm, config=config)
    assert [prompt_kind(p) for p in seen] == ["hyde", "decompose", "answer", "validate"]
    assert nodes_of(result.trace) == ["plan", "retrieve", "enrich", "retrieve", "rerank", "answer", "validate"]
    (enriched,) = entries(result.trace, "enrich")
    assert enriched["sub_queries"] == [QUESTION, sub] and enriched["hyde"] == HYDE
    before, after = entries(result.trace, "retrieve")
    assert len(before["queries"]) == 1 and len(after["queries"]) == 2
    assert after["queries"][0]["sparse"].startswith(QUESTION) and after["queries"][1]["sparse"].startswith(sub)

    llm, seen = scripted(f"1. {sub}", "4,812", "Yes")  # decomposition alone, on disagreement
    config = AskConfig.of(answerer="chat", hyde="never", decompose="disagreement", disagreement=0.0, max_rounds=1,
                       memory=False)  # the first run's recalled sub-query would count as the decomposition
    dr.ask(QUESTION, llm=llm, config=config)
    assert [prompt_kind(p) for p in seen] == ["decompose", "answer", "validate"]


def test_enrich_route_only_in_round_one_and_once():
    from types import SimpleNamespace

    from docrefrag.graph.graph import route_after_retrieve

    def route(hyde="disagreement", decompose="never", **state):  # the default modes
        config = AskConfig.of(hyde=hyde, decompose=decompose, disagreement=0.5)
        runtime = SimpleNamespace(context=SimpleNamespace(config=config))
        plan = {"hyde": "", "sub_queries": [QUESTION]}
        return route_after_retrieve({"round": 1, "query_disagreement": 0.5, "plan": plan, **state}, runtime)

    assert route() == route(hyde="never", decompose="disagreement") == "enrich"
    assert route(query_disagreement=0.49) == "rerank"
    assert route(round=2, query_disagreement=0.9) == "rerank"  # a refined query's disagreement brings nothing new
    assert route(enriched=True) == "rerank"
    assert route(plan={"hyde": HYDE}) == "rerank"
    assert route(hyde="never", decompose="disagreement", plan={"sub_queries": [QUESTION, "Which table?"]}) == "rerank"
    assert route(hyde="always") == route(hyde="never") == "rerank"


def test_rerank_node_replaced_by_dotted_path(dr, report):
    _, doc_id = report
    llm, seen = scripted(HYDE, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=1),
                    nodes={"rerank": f"{__name__}:reverse_rerank"})

    assert [prompt_kind(p) for p in seen] == ["hyde", "answer", "validate"]
    (retrieve,) = entries(result.trace, "retrieve")
    (rerank,) = entries(result.trace, "rerank")
    (answer,) = entries(result.trace, "answer")
    fused = retrieved_pages(retrieve)
    assert len(fused) > 3 and rerank["note"] == "reversed" and rerank["pages"] == fused[::-1]
    read = [tuple(p) for p in answer["pages"]]  # page by page until one answers: the first answered here
    assert read == [(doc_id, fused[-1])] and fused[-1] != fused[0]


def test_chat_reranker_needs_a_local_model(dr):
    llm, seen = scripted(HYDE, "4,812", "Yes")
    with pytest.raises(ValueError, match="local model's logits.*--llm local or local:DIR"):
        dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", rerank=True, reranker="chat"))
    assert not seen  # refused before any call
    with pytest.raises(ValueError, match="reranker must be 'reader' or 'chat'"):
        AskConfig.of(reranker="bm25")


@pytest.mark.parametrize("answerer", ["reader", "chat"])
def test_no_page_to_read_is_not_answerable_without_reading(dr, answerer):
    llm, seen = scripted()  # any call to the model would raise: it has no reply to give
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer=answerer, hyde="never", max_rounds=1),
                    nodes={"rerank": f"{__name__}:drop_all_hits"})

    assert seen == [] and result.answer == "Not answerable" and result.claims == []
    (answer,) = entries(result.trace, "answer")
    assert answer["pages"] == []


def test_build_graph_rejects_unknown_node_names():
    with pytest.raises(ValueError, match=r"unknown node 'rank'.*rerank"):
        build_graph(nodes={"rank": reverse_rerank})


@pytest.mark.parametrize("path", [f"{__name__}.reverse_rerank", f"{__name__}:no_such_node",
                                  "no_such_package.nodes:rerank", ":reverse_rerank"])
def test_build_graph_rejects_bad_dotted_paths(path):
    with pytest.raises(ValueError, match="package.module:function|cannot import"):
        build_graph(nodes={"rerank": path})

"""The ask graph: plan -> retrieve [-> enrich -> retrieve] -> rerank [-> gather] -> answer -> validate
-> done | refine -> retrieve ...; with `AskConfig.search.retrieval="agent"`, explore (the tool-using retrieval
agent, agents/tool_agent.py) takes the place of retrieve [-> enrich -> retrieve] in every round.

The graph acts on the branches' disagreement: when the first round's search of the question finds the
BM25 and dense rankings uncorrelated or opposed (query disagreement >= `AskConfig.search.disagreement`),
the enrich node has the chat model write the plan's LLM parts whose mode is "disagreement" (the
hypothetical answer passage, HyDE, for the dense branch: the default; the sub-queries with
`decompose="disagreement"`) and the question is searched again (at most once per run). A mode
"always" writes that part in the plan node instead, "never" not at all. A replacement enrich node
must set `enriched`, or the graph would route to it again. With `AskConfig.reading.evidence="graph"` the gather
node runs the evidence controller (agents/evidence.py) on the top pages and the answer node reads the
elements it opened instead of the pages (with "pages", the default, the graph goes from rerank to answer).

Nodes are small functions named by verb; each returns a partial state and appends one trace entry (the
plan node also a "memory" one when it recalls the plans of similar validated questions: graph/memory.py).
Any node can be replaced by a callable with the same signature (`build_graph(nodes={...})`, or a
dotted import path "package.module:function" from the CLI/API configuration).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Literal

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from docrefrag.agents import prompts
from docrefrag.agents.answer import (
    PageText,
    answer_question,
    asks_for_section,
    cite,
    outline_page,
    page_texts,
    read_with_reader,
)
from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.evidence import Budgets, chat_chooser, evidence_pages, evidence_rows
from docrefrag.agents.evidence import gather as gather_evidence
from docrefrag.agents.planner import decompose_question, disagrees, plan_question, write_hyde
from docrefrag.agents.plugins import load_object
from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.agents.rerank import reorder
from docrefrag.agents.retrieval import SEARCH_DEPTH, search_plan
from docrefrag.agents.schemas import Claim, Plan
from docrefrag.agents.tool_agent import find_pages
from docrefrag.agents.tools import ToolRegistry
from docrefrag.agents.validation import validate
from docrefrag.graph.context import AskConfig, AskContext
from docrefrag.graph.memory import seed_plan
from docrefrag.graph.state import AskState
from docrefrag.indexes.hybrid import Hit

logger = logging.getLogger(__name__)

Node = Callable[[AskState, Runtime[AskContext]], dict]


def plan(state: AskState, runtime: Runtime[AskContext]) -> dict:
    cfg = runtime.context.config
    started = time.time()  # the run's clock (time to first answer, time budget) includes the planning
    planned, notes = plan_question(state["question"], runtime.context.llm, decompose=cfg.search.decompose == "always",
                                   hyde=cfg.search.hyde == "always")
    p, memory = seed_plan(planned, state["question"], state.get("doc_ids"), runtime.context)  # graph/memory.py
    return {"plan": p.model_dump(), "round": 1, "tokens": 0, "started_at": started,  # a reused thread starts afresh:
            "query_disagreement": 0.0, "enriched": False, "ttft_s": None, "answer": "", "claims": [], "verdict": {},
            "read": [], "best": {}, "evidence": [],
            "trace": [{"node": "plan", "plan": planned.model_dump(), "notes": notes}, *memory]}


def retrieve(state: AskState, runtime: Runtime[AskContext]) -> dict:
    ctx, cfg = runtime.context, runtime.context.config
    p = Plan(**state["plan"])
    k = cfg.reading.pages_read(state.get("round", 1))  # each refinement round widens the search
    hits, runs = search_plan(p, state["question"], ctx.searcher, state.get("doc_ids"), max(k, SEARCH_DEPTH),
                             cfg.search.fusion)
    queries = [{"sparse": r.sparse_query, "dense": r.dense_query[:200], "top_overlap": r.top_overlap,
                "query_disagreement": round(r.query_disagreement, 3), "weight_sparse": round(r.weight_sparse, 3),
                "switched_off": {"sparse": r.sparse_off, "dense": r.dense_off}}
               for r in runs]
    return {"hits": [asdict(h) for h in hits], "query_disagreement": runs[0].query_disagreement if runs else 0.0,
            "trace": [{"node": "retrieve", "round": state.get("round", 1), "queries": queries,
                       "hits": [_hit_summary(h) for h in hits]}]}


def explore(state: AskState, runtime: Runtime[AskContext]) -> dict:
    """The retrieval agent (retrieval "agent"): the chat model calls the tools step by step, following the store's
    active instructions; the pages it found, best first, are the round's hits."""
    ctx, cfg = runtime.context, runtime.context.config
    tools = ToolRegistry.from_config(ctx.store, ctx.searcher, cfg.search.agent_tools)
    instructions = ctx.store.instructions.active(prompts.AGENT_SEED)
    scope, notes = state.get("doc_ids") or None, []
    if scope and len(scope) == 1:
        notes.append(f"Document: {scope[0]} ({len(ctx.store.pages.numbers(scope[0]))} pages)")
    p = Plan(**state["plan"])
    if state.get("round", 1) > 1 and p.sub_queries:
        notes.append(f"An earlier search found no page that supports an answer; search other words too, "
                     f"e.g.: {p.sub_queries[0]}")
    found = find_pages(state["question"], list(tools.tools.values()), ctx.llm, instructions.text,
                       cfg.search.agent_steps, scope, "\n".join(notes))
    hits = [Hit(doc, page, score, None, None, snippet=found.snippets.get((doc, page), ""))
            for doc, page, score in found.pages]
    return {"hits": [asdict(h) for h in hits],
            "trace": [{"node": "explore", "round": state.get("round", 1), "instructions": instructions.version,
                       "stopped": found.stopped, "calls": [c.summary() for c in found.calls],
                       "hits": [_hit_summary(h) for h in hits]}]}


def route_retrieval(state: AskState, runtime: Runtime[AskContext]) -> Literal["retrieve", "explore"]:
    return "explore" if runtime.context.config.search.retrieval == "agent" else "retrieve"


def _to_enrich(state: AskState, cfg: AskConfig) -> list[str]:
    """The plan parts the enrich node would write now: those in mode "disagreement" that the plan lacks."""
    p = state["plan"]
    return [part for part, mode, present in (("hyde", cfg.search.hyde, bool(p.get("hyde"))),
                                             ("decompose", cfg.search.decompose, len(p.get("sub_queries") or []) > 1))
            if mode == "disagreement" and not present]


def enrich(state: AskState, runtime: Runtime[AskContext]) -> dict:
    """Write the HyDE passage and/or the sub-queries (the question's search found the branches disagreeing)."""
    ctx = runtime.context
    p = Plan(**state["plan"])
    parts, notes = _to_enrich(state, ctx.config), []
    if "hyde" in parts:
        p.hyde = write_hyde(state["question"], ctx.llm)
    if "decompose" in parts:
        p.sub_queries, notes = decompose_question(state["question"], ctx.llm)
    return {"plan": p.model_dump(), "enriched": True,
            "trace": [{"node": "enrich", "query_disagreement": round(state.get("query_disagreement", 0.0), 3),
                       "hyde": p.hyde, "sub_queries": p.sub_queries, "notes": notes}]}


def route_after_retrieve(state: AskState, runtime: Runtime[AskContext]) -> Literal["enrich", "rerank"]:
    cfg = runtime.context.config
    if (state.get("round", 1) == 1 and not state.get("enriched") and _to_enrich(state, cfg)
            and disagrees(state.get("query_disagreement", 0.0), cfg.search.disagreement)):
        return "enrich"
    return "rerank"


def rerank(state: AskState, runtime: Runtime[AskContext]) -> dict:
    """Reorder the retrieved pages with the context's reranker; without one the fused order stays."""
    reranker = runtime.context.reranker
    if reranker is None:
        return {"trace": [{"node": "rerank", "note": "no reranker configured; fused order kept"}]}
    hits = [Hit(**h) for h in state["hits"]]
    order, scores = reorder(reranker, state["question"], [(h.doc_id, h.page) for h in hits])
    ranked = [replace(hits[i], rerank=scores[i]) for i in order]
    return {"hits": [asdict(h) for h in ranked],
            "trace": [{"node": "rerank", "hits": [_hit_summary(h) for h in ranked]}]}


def route_after_rerank(state: AskState, runtime: Runtime[AskContext]) -> Literal["gather", "answer"]:
    return "gather" if runtime.context.config.reading.evidence == "graph" else "answer"


def _top_pages(state: AskState, cfg: AskConfig) -> list[tuple[str, int]]:
    """The pages the answerer reads (or the evidence controller starts from): each refinement round more."""
    return [(h["doc_id"], h["page"]) for h in state["hits"]][:cfg.reading.pages_read(state.get("round", 1))]


def gather(state: AskState, runtime: Runtime[AskContext]) -> dict:
    """The evidence controller over the evidence graph from the top pages, within the config's budgets."""
    ctx, cfg = runtime.context, runtime.context.config
    b = cfg.evidence_budgets
    budgets = Budgets(b.evidence_tokens, b.evidence_steps, b.evidence_seconds)
    query = ctx.searcher.embedder.embed_queries([state["question"]])[0]
    choose = chat_chooser(ctx.llm) if b.evidence_driver == "llm" else None
    found = gather_evidence(ctx.store, state["question"], query, _top_pages(state, cfg), budgets, choose)
    moves = [{"step": m.step, "action": m.action, "node": list(m.node), "edge": m.edge, "score": round(m.score, 4),
              "tokens": m.tokens} for m in found.moves]
    return {"evidence": evidence_rows(ctx.store, found),
            "trace": [{"node": "gather", "evidence": "graph", "driver": b.evidence_driver, "budgets": asdict(budgets),
                       "tokens": found.tokens, "steps": found.steps, "seconds": round(found.seconds, 4),
                       "stopped": found.stopped,
                       "elements": [list(k) for k in found.elements], "moves": moves}]}


def answer(state: AskState, runtime: Runtime[AskContext]) -> dict:
    ctx, cfg = runtime.context, runtime.context.config
    graph = cfg.reading.evidence == "graph"  # read the gathered elements, not the pages
    if not state["hits"] or (graph and not state.get("evidence")):  # nothing to read (no page matched, e.g. a
        text, tokens, claims, pages, source = NOT_ANSWERABLE, 0, [], [], 0  # scanned document whose OCR found no text)
    else:
        pages = (evidence_pages(state["evidence"]) if graph
                 else page_texts(ctx.store, _top_pages(state, cfg), state["question"], cfg.reading.chars_per_page))
        docs = {p.doc_id for p in pages}  # a section question about one document reads its outline first
        outline = (outline_page(ctx.store, next(iter(docs)), state["question"], cfg.reading.chars_per_page)
                   if asks_for_section(state["question"]) and len(docs) == 1 and not graph
                   and cfg.reading.answerer == "chat" else None)
        pages = [outline, *pages] if outline else pages
        if cfg.reading.answerer == "reader":  # the reader reads the pages' tokens; the elements are the citations
            text, tokens, expanded = read_with_reader(state["question"], pages, ctx.store, ctx.reader)
            claims, source = cite(text, pages if graph else expanded or pages, state["question"]), len(pages)
        else:  # page by page (the gathered elements: at once) until one answers; the last prompt read answered
            text, tokens, prompts_read = answer_question(state["question"], [pages] if graph else [[p] for p in pages],
                                                         ctx.llm)
            pages = [p for read in prompts_read for p in read]
            claims, source = cite(text, pages, state["question"]), len(prompts_read[-1])
    update = {"answer": text, "claims": [c.model_dump() for c in claims],
              "read": [{"doc_id": p.doc_id, "page": p.page, "text": p.text, "source": i >= len(pages) - source}
                       for i, p in enumerate(pages)],
              "tokens": state.get("tokens", 0) + tokens,
              "trace": [{"node": "answer", "answer": text, "evidence": cfg.reading.evidence,
                         "pages": [(p.doc_id, p.page) for p in pages]}]}
    if state.get("ttft_s") is None:
        update["ttft_s"] = time.time() - state.get("started_at", time.time())
    return update


def validate_answer(state: AskState, runtime: Runtime[AskContext]) -> dict:
    ctx = runtime.context
    # the validator reads text only
    read = state.get("read", [])
    pages = [PageText(r["doc_id"], r["page"], r["text"], []) for r in read]
    source = [p for p, r in zip(pages, read, strict=True) if r.get("source", True)]
    verdict = validate(state["question"], state["answer"], [Claim(**c) for c in state.get("claims", [])], pages,
                       ctx.llm, source)
    update = {"verdict": verdict.model_dump(), "trace": [{"node": "validate", **verdict.model_dump()}]}
    best = state.get("best") or {}
    if verdict.confidence >= best.get("verdict", {}).get("confidence", -1.0):  # a tie goes to the later round
        update["best"] = {"answer": state["answer"], "claims": state.get("claims", []), "verdict": verdict.model_dump(),
                          "round": state.get("round", 1)}
    return update


_QUERY_LABEL = re.compile(r"^(?:the\s+)?(?:new\s+|search\s+|rewritten\s+)*query\s*:\s*", re.IGNORECASE)


def refine(state: AskState, runtime: Runtime[AskContext]) -> dict:
    ctx = runtime.context
    p = Plan(**state["plan"])
    previous = p.sub_queries[0] if p.sub_queries else state["question"]
    reply = invoke_llm(ctx.llm, [HumanMessage(prompts.REFINE.format(question=state["question"], query=previous))],
                       stop=["\n"])
    text = str(reply.content).strip()
    new_query = _QUERY_LABEL.sub("", text.splitlines()[0].strip()).strip(' "') if text else ""  # "Query: ..." -> ...
    searched = {*(p.sub_queries or []), state["question"]}
    if not new_query or new_query in searched:  # the model echoed a query: search the question's intents alone
        new_query = " ".join(dict.fromkeys([*p.entities, *p.visual_anchors, *p.keywords])) or state["question"]
    p.sub_queries = list(dict.fromkeys([new_query, *(p.sub_queries or [state["question"]])]))  # sub-questions kept
    return {"plan": p.model_dump(), "round": state.get("round", 1) + 1,
            "trace": [{"node": "refine", "previous": previous, "query": new_query,
                       "reason": state["verdict"].get("missing", "")}]}


def route_after_validate(state: AskState, runtime: Runtime[AskContext]) -> Literal["refine", "__end__"]:
    cfg = runtime.context.config
    verdict = state.get("verdict", {})
    if verdict.get("confidence", 0.0) >= cfg.validation.tau:
        return END
    if state.get("round", 1) >= cfg.validation.max_rounds:
        return END
    if (time.time() - state.get("started_at", time.time()) > cfg.validation.time_budget_s
            or state.get("tokens", 0) > cfg.validation.token_budget):
        return END
    return "refine"


def _hit_summary(h: Hit) -> dict:
    return {"doc_id": h.doc_id, "page": h.page, "fused": round(h.fused, 4),
            "sparse": None if h.sparse is None else round(h.sparse, 3),
            "dense": None if h.dense is None else round(h.dense, 3),
            "rerank": None if h.rerank is None else round(h.rerank, 3)}


NODES: dict[str, Node] = {"plan": plan, "retrieve": retrieve, "explore": explore, "enrich": enrich, "rerank": rerank,
                          "gather": gather, "answer": answer, "validate": validate_answer, "refine": refine}


def build_graph(nodes: dict[str, Node | str] | None = None, checkpointer=None):
    """Compile the ask graph; `nodes` replaces any of NODES by a callable or a dotted path."""
    chosen = dict(NODES)
    for name, node in (nodes or {}).items():
        if name not in NODES:
            raise ValueError(f"unknown node {name!r}; the graph's nodes are {', '.join(NODES)}")
        chosen[name] = load_object(node) if isinstance(node, str) else node
    builder = StateGraph(AskState, context_schema=AskContext)
    for name, fn in chosen.items():
        builder.add_node(name, fn)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", route_retrieval, ["retrieve", "explore"])
    builder.add_conditional_edges("retrieve", route_after_retrieve, ["enrich", "rerank"])
    builder.add_edge("enrich", "retrieve")
    builder.add_conditional_edges("rerank", route_after_rerank, ["gather", "answer"])
    builder.add_edge("gather", "answer")
    builder.add_edge("answer", "validate")
    builder.add_conditional_edges("validate", route_after_validate, ["refine", END])
    builder.add_conditional_edges("refine", route_retrieval, ["retrieve", "explore"])
    builder.add_edge("explore", "rerank")
    return builder.compile(checkpointer=checkpointer)

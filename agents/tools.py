"""The tool registry: search and reading capabilities as LangChain tools, for tool-calling agents.

Built-in tools (bound to one store and searcher): `search_pages` (hybrid), `bm25_search`,
`visual_search`, `read_page`, and three over a document's evidence graph (indexes/evidence_graph.py),
whose nodes they name "PAGE:ELEMENT" ("0:0" the document, "3:0" page 3, "3:2" its second element):
`list_sections` (the outline of headings), `open_section` (the elements under a heading, its
subsections' too, in reading order) and `neighbours` (a node's edges). A team adds its own with
`ToolRegistry.add` or by configuration, `ToolRegistry.from_config(store, searcher,
"package.module:factory,...")`, where each factory takes (store, searcher) and returns a LangChain
tool. Tool errors (a bad argument, an unknown document or node) come back as text the agent can read.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence

import numpy as np
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from docrefrag.agents.plugins import load_object
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.evidence_graph import ROOT, DocumentGraph, Node
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

ToolFactory = Callable[[Store, HybridSearcher], BaseTool]
EDGE_KINDS = ("contains", "next", "adjacent", "caption", "section", "similar")  # of the evidence graph
_NODE_ID = re.compile(r"\s*(\d+):(\d+)\s*")


def _scope(store: Store, doc: str | None) -> list[str] | None:
    return None if not doc else [store.catalog.resolve(doc)]


def _errors_as_text(fn: Callable[..., str]) -> Callable[..., str]:
    """Bad arguments (an empty query, k < 1, an unknown document, a page out of range) and a busy
    store become ToolExceptions, which the tool returns as text for the agent to read and correct."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> str:
        try:
            return fn(*args, **kwargs)
        except (ValueError, StoreError) as e:
            raise ToolException(str(e)) from e

    return wrapper


def node_id(node: Node) -> str:
    return f"{node[0]}:{node[1]}"


def _node(graph: DocumentGraph, ref: str) -> Node:
    """The node of an id "PAGE:ELEMENT" in the document's graph."""
    match = _NODE_ID.fullmatch(ref)
    if match is None:
        raise ValueError(f"{ref!r} is not a node id: ids are PAGE:ELEMENT, e.g. '2:3'; list_sections gives "
                         "the headings' ids")
    node = (int(match[1]), int(match[2]))
    if node not in graph.nodes:
        raise ValueError(f"document {graph.doc_id} has no node {node_id(node)}; list_sections gives the headings' "
                         "ids, neighbours a node's")
    return node


def _under(graph: DocumentGraph, section: Node) -> list[Node]:
    """Every element under a heading (or the document), its subsections' too, in reading order."""
    found, todo = [], [section]
    while todo:
        children = graph.children(todo.pop())
        found += children
        todo += children
    return sorted(found)


def builtin_tools(store: Store, searcher: HybridSearcher) -> list[BaseTool]:
    def search_pages(query: str, k: int = 5, doc: str | None = None) -> str:
        """Rank pages for a query with BM25 and page-region vectors fused; returns JSON hits (1-based pages)."""
        hits = searcher.search(query, k=k, doc_ids=_scope(store, doc))
        return json.dumps([{"doc_id": h.doc_id, "page": h.page, "score": round(h.fused, 4),
                            "snippet": h.snippet[:200]} for h in hits])

    def bm25_search(query: str, k: int = 5, doc: str | None = None) -> str:
        """Rank pages by BM25 over their text; returns JSON hits."""
        hits = store.bm25.index().search(query, k, _scope(store, doc) or store.catalog.ready_ids())
        return json.dumps([{"doc_id": h.doc_id, "page": h.page, "score": round(h.score, 3)} for h in hits])

    def visual_search(query: str, k: int = 5, doc: str | None = None) -> str:
        """Rank pages by their best region embedding plus their pooled page vector (the visual index's page
        score) against the query; returns JSON hits."""
        vec = searcher.embedder.embed_queries([query])[0]
        hits = store.visual.search(np.asarray(vec), k=k, doc_ids=_scope(store, doc) or store.catalog.ready_ids())
        return json.dumps([{"doc_id": h.doc_id, "page": h.page, "score": round(h.score, 3)} for h in hits])

    def read_page(doc: str, page: int) -> str:
        """The markdown of one page (1-based page number)."""
        return store.pages.markdown(store.catalog.resolve(doc), page)

    def list_sections(doc: str) -> str:
        """The document's outline: JSON of each heading's id ("PAGE:ELEMENT"), text, depth (1 = top level),
        page and the number of elements under it (its subsections' included); open one with open_section."""
        graph = store.graphs.get(store.catalog.resolve(doc))
        return json.dumps([{"id": node_id(h), "text": graph.nodes[h].text, "depth": graph.depth(h), "page": h[0],
                            "elements": len(_under(graph, h))} for h in graph.headings()])

    def open_section(doc: str, section: str, max_chars: int = 4000) -> str:
        """JSON of the elements under a heading (its id from list_sections; "0:0" the whole document), its
        subsections' too, in reading order: id, kind, page, bbox (PDF points), text; at most max_chars of
        text in all, the rest cut ("truncated": true)."""
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        graph = store.graphs.get(store.catalog.resolve(doc))
        node = _node(graph, section)
        if node != ROOT and graph.nodes[node].kind != "heading":
            raise ValueError(f"{node_id(node)} is a {graph.nodes[node].kind}, not a section heading; list_sections "
                             "gives the headings' ids")
        elements, left, truncated = [], max_chars, False
        for n in _under(graph, node):
            e = graph.nodes[n]
            truncated = len(e.text) > left
            if not truncated or left:
                elements.append({"id": node_id(n), "kind": e.kind, "page": n[0],
                                 "bbox": [round(v, 1) for v in e.bbox], "text": e.text[:left]})
            if truncated:
                break
            left -= len(e.text)
        return json.dumps({"section": node_id(node), "heading": graph.nodes[node].text, "elements": elements,
                           "truncated": truncated})

    def neighbours(doc: str, node: str, kinds: list[str] | None = None) -> str:
        """JSON of a node's neighbours in the document's evidence graph: id, edge (contains, next, adjacent,
        caption, section or similar), weight, kind, page and a text snippet; `kinds` keeps those edges only."""
        unknown = sorted(set(kinds or ()) - set(EDGE_KINDS))
        if unknown:
            raise ValueError(f"unknown edge kind(s) {', '.join(unknown)}; the kinds are {', '.join(EDGE_KINDS)}")
        graph = store.graphs.get(store.catalog.resolve(doc))
        found = graph.neighbours(_node(graph, node), tuple(kinds) if kinds else None)
        return json.dumps([{"id": node_id(n), "edge": kind, "weight": round(weight, 4), "kind": graph.nodes[n].kind,
                            "page": n[0], "snippet": graph.nodes[n].text[:200]} for n, kind, weight in found])

    return [StructuredTool.from_function(_errors_as_text(fn), handle_tool_error=True)
            for fn in (search_pages, bm25_search, visual_search, read_page, list_sections, open_section, neighbours)]


class ToolRegistry:
    def __init__(self, tools: Sequence[BaseTool]) -> None:
        self.tools: dict[str, BaseTool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: BaseTool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered; give yours another name")
        self.tools[tool.name] = tool

    def __getitem__(self, name: str) -> BaseTool:
        if name not in self.tools:
            raise KeyError(f"no tool {name!r}; registered: {', '.join(self.tools)}")
        return self.tools[name]

    @classmethod
    def from_config(cls, store: Store, searcher: HybridSearcher, extra: str = "") -> ToolRegistry:
        """The built-in tools and a team's (`extra`: comma-separated 'package.module:factory' paths, as the
        ask config's agent_tools and `--agent-tools` have them)."""
        registry = cls(builtin_tools(store, searcher))
        for path in (p.strip() for p in extra.split(",") if p.strip()):
            factory: ToolFactory = load_object(path, "package.module:factory")
            registry.add(factory(store, searcher))
        return registry

"""The tool registry: search and reading capabilities as LangChain tools, for tool-calling agents.

Built-in tools (bound to one store and searcher): `search_pages` (hybrid), `bm25_search`,
`visual_search`, `read_page`. A team adds its own with `ToolRegistry.add` or by configuration,
`ToolRegistry.from_config(store, searcher, ["package.module:factory"])`, where each factory takes
(store, searcher) and returns a LangChain tool. Tool errors come back as text the agent can read.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence

import numpy as np
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from docrefrag.agents.plugins import load_object
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

ToolFactory = Callable[[Store, HybridSearcher], BaseTool]


def _scope(store: Store, doc: str | None) -> list[str] | None:
    return None if not doc else [store.resolve(doc)]


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


def builtin_tools(store: Store, searcher: HybridSearcher) -> list[BaseTool]:
    def search_pages(query: str, k: int = 5, doc: str | None = None) -> str:
        """Rank pages for a query with BM25 and page-region vectors fused; returns JSON hits (1-based pages)."""
        hits = searcher.search(query, k=k, doc_ids=_scope(store, doc))
        return json.dumps([{"doc_id": h.doc_id, "page": h.page, "score": round(h.fused, 4),
                            "snippet": h.snippet[:200]} for h in hits])

    def bm25_search(query: str, k: int = 5, doc: str | None = None) -> str:
        """Rank pages by BM25 over their text; returns JSON hits."""
        hits = store.bm25().search(query, k, _scope(store, doc) or store.ready_ids())
        return json.dumps([{"doc_id": h.doc_id, "page": h.page, "score": round(h.score, 3)} for h in hits])

    def visual_search(query: str, k: int = 5, doc: str | None = None) -> str:
        """Rank pages by their best region embedding plus their pooled page vector (the visual index's page
        score) against the query; returns JSON hits."""
        vec = searcher.embedder.embed_queries([query])[0]
        hits = store.visual.search(np.asarray(vec), k=k, doc_ids=_scope(store, doc) or store.ready_ids())
        return json.dumps([{"doc_id": h.doc_id, "page": h.page, "score": round(h.score, 3)} for h in hits])

    def read_page(doc: str, page: int) -> str:
        """The markdown of one page (1-based page number)."""
        return store.page_markdown(store.resolve(doc), page)

    return [StructuredTool.from_function(_errors_as_text(fn), handle_tool_error=True)
            for fn in (search_pages, bm25_search, visual_search, read_page)]


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
    def from_config(cls, store: Store, searcher: HybridSearcher, extra: Sequence[str] = ()) -> ToolRegistry:
        registry = cls(builtin_tools(store, searcher))
        for path in extra:
            factory: ToolFactory = load_object(path, "package.module:factory")
            registry.add(factory(store, searcher))
        return registry

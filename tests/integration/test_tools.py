"""The tool registry: built-in tools over a real store, errors as text, tools added by configuration."""

import json

import pytest
from langchain_core.tools import StructuredTool

from docrefrag.agents.tools import ToolRegistry
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store


def shout_tool(store, searcher):
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    return StructuredTool.from_function(shout)


@pytest.fixture(scope="module")
def registry(tmp_path_factory, ingest, light_pdf, embedder):
    folder = tmp_path_factory.mktemp("tools")
    store = Store(folder / "store", create=True)
    ingest(store, light_pdf(folder / "census.pdf", 3, tag="census"))
    yield ToolRegistry.from_config(store, HybridSearcher(store, embedder), f"{__name__}:shout_tool")
    store.close()


def test_builtin_tools_search_and_read(registry):
    hits = json.loads(registry["search_pages"].invoke({"query": "census station s002", "k": 2}))
    assert hits[0]["page"] == 2
    assert json.loads(registry["bm25_search"].invoke({"query": "census station s002", "k": 1}))[0]["page"] == 2
    assert len(json.loads(registry["visual_search"].invoke({"query": "census station", "k": 3}))) == 3
    assert "census" in registry["read_page"].invoke({"doc": "census.pdf", "page": 2}).lower()


def test_tool_errors_are_text_for_the_agent(registry):
    reply = registry["read_page"].invoke({"doc": "nosuchdoc", "page": 1})
    assert "no document 'nosuchdoc'" in reply and "docrefrag docs" in reply
    assert "empty" in registry["search_pages"].invoke({"query": "  "})
    for name in ("search_pages", "bm25_search", "visual_search"):
        assert "k must be" in registry[name].invoke({"query": "census", "k": 0}), name
        assert "no document 'nosuchdoc'" in registry[name].invoke({"query": "census", "doc": "nosuchdoc"}), name
    assert "page 99" in registry["read_page"].invoke({"doc": "census.pdf", "page": 99})


def test_tools_added_by_configuration(registry):
    assert registry["shout"].invoke({"text": "abc"}) == "ABC"
    with pytest.raises(ValueError, match="already registered"):
        registry.add(registry["shout"])
    with pytest.raises(KeyError, match="registered"):
        registry["nope"]
    with pytest.raises(ValueError, match="package.module:factory"):
        ToolRegistry.from_config(None, None, "no_such_module_xyz:factory")

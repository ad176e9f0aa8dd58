"""The structure tools over a real ingested document (test_evidence_graph's two sections, "2 Results"
going on over page 2 into "2.1 Details"): the outline, a section's elements in reading order and cut
at max_chars, a node's neighbours, and bad ids, kinds and documents answered as text for the agent."""

from __future__ import annotations

import json

import pytest
from test_evidence_graph import ELEMENTS, make_two_sections

from docrefrag.agents.tools import ToolRegistry
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store


@pytest.fixture(scope="module")
def store(tmp_path_factory, ingest):
    folder = tmp_path_factory.mktemp("structure")
    store = Store(folder / "store", create=True)
    (result,) = ingest(store, make_two_sections(folder / "two.pdf"))
    assert result.status == "added"
    yield store
    store.close()


@pytest.fixture(scope="module")
def tools(store, embedder):
    return ToolRegistry.from_config(store, HybridSearcher(store, embedder))


def call(tools: ToolRegistry, name: str, **args):
    return json.loads(tools[name].invoke({"doc": "two.pdf", **args}))


def test_list_sections_is_the_outline_of_headings(tools):
    assert call(tools, "list_sections") == [
        {"id": "1:1", "text": "1 Introduction", "depth": 1, "page": 1, "elements": 2},
        {"id": "1:4", "text": "2 Results", "depth": 1, "page": 1, "elements": 6},  # table, chart, caption, page 2
        {"id": "2:2", "text": "2.1 Details", "depth": 2, "page": 2, "elements": 1},
    ]


def test_open_section_reads_its_subsections_in_reading_order_and_cuts_at_max_chars(tools):
    opened = call(tools, "open_section", section="1:4")
    assert (opened["section"], opened["heading"], opened["truncated"]) == ("1:4", "2 Results", False)
    assert [e["id"] for e in opened["elements"]] == ["1:5", "1:6", "1:7", "2:1", "2:2", "2:3"]
    for e in opened["elements"]:
        page, element = map(int, e["id"].split(":"))
        _, kind, _, start = ELEMENTS[(page, element)]
        assert (e["kind"], e["page"], e["text"][:len(start)]) == (kind, page, start)
    assert opened["elements"][0]["bbox"] == [55.0, 320.0, 535.0, 386.0]  # the ruled table

    table = opened["elements"][0]["text"]
    cut = call(tools, "open_section", section="1:4", max_chars=len(table) + 10)
    assert cut["truncated"] and [e["id"] for e in cut["elements"]] == ["1:5", "1:6", "1:7"]  # the chart has no text
    assert cut["elements"][0]["text"] == table and cut["elements"][2]["text"] == "Figure 1. "
    assert sum(len(e["text"]) for e in cut["elements"]) == len(table) + 10

    whole = call(tools, "open_section", section="0:0")
    assert [e["id"] for e in whole["elements"]] == [f"{p}:{e}" for p, e in sorted(ELEMENTS)]
    assert call(tools, "open_section", section="2:2")["elements"][0]["text"].startswith("Lynx hunt")


def test_neighbours_of_a_chart_are_its_caption_by_three_edges(tools):
    found = call(tools, "neighbours", node="1:6")
    assert [(n["id"], n["edge"]) for n in found] == [("1:7", "adjacent"), ("1:7", "caption"), ("1:7", "next")]
    assert found[0]["kind"] == "caption" and found[0]["page"] == 1
    assert found[0]["snippet"].startswith("Figure 1. Sightings")
    assert [n["edge"] for n in call(tools, "neighbours", node="1:6", kinds=["caption"])] == ["caption"]
    page = call(tools, "neighbours", node="2:0", kinds=["contains"])
    assert [n["id"] for n in page] == ["2:1", "2:2", "2:3"]
    similar = call(tools, "neighbours", node="2:3", kinds=["similar"])
    assert similar and all(n["page"] == 1 and -1 <= n["weight"] <= 1 for n in similar)


@pytest.mark.parametrize("name, args, words", [
    ("list_sections", {"doc": "nosuchdoc"}, "no document 'nosuchdoc'"),
    ("open_section", {"doc": "nosuchdoc", "section": "1:1"}, "no document 'nosuchdoc'"),
    ("open_section", {"section": "intro"}, "'intro' is not a node id: ids are PAGE:ELEMENT"),
    ("open_section", {"section": "9:9"}, "has no node 9:9"),
    ("open_section", {"section": "1:2"}, "1:2 is a text, not a section heading"),
    ("open_section", {"section": "1:1", "max_chars": 0}, "max_chars must be >= 1"),
    ("neighbours", {"node": "1"}, "'1' is not a node id"),
    ("neighbours", {"node": "3:1"}, "has no node 3:1"),
    ("neighbours", {"node": "1:6", "kinds": ["nearby"]}, "unknown edge kind(s) nearby; the kinds are contains"),
])
def test_bad_ids_come_back_as_text(tools, name, args, words):
    reply = tools[name].invoke({"doc": "two.pdf", **args})
    assert isinstance(reply, str) and words in reply, reply


def test_a_section_question_reads_the_outline_and_cites_the_heading_on_its_page(store):
    """`ask` reads the outline first for a question after a section: its headings, each citable where it is."""
    from docrefrag.agents.answer import answer_messages, answered, asks_for_section, cite, outline_page

    question = "Which section discusses the details of the results?"
    outline = outline_page(store, store.catalog.resolve("two.pdf"), question, 4000)
    assert outline.outline and outline.text == "# 1 Introduction\n# 2 Results\n# 2.1 Details"
    assert [(c.page, c.text) for c in outline.chunks] == [(1, "1 Introduction"), (1, "2 Results"), (2, "2.1 Details")]
    assert "[Outline]" in answer_messages(question, [outline])[-1].content
    assert asks_for_section(question) and answered(question, "Details")  # a heading may repeat the question
    assert not asks_for_section("What were the results in 2021?") and not asks_for_section("What chapter 11 filings?")
    (claim,) = cite("2.1 Details", [outline], question)
    assert claim.citations[0].page == 2 and claim.citations[0].bbox == outline.chunks[2].bbox
    (claim,) = cite("['2 Results', '2.1 Details']", [outline], question)  # a box never spans two pages
    on_page = [c.bbox for c in outline.chunks if c.page == claim.citations[0].page]
    x0, y0, x1, y1 = claim.citations[0].bbox  # the box lies within that page's headings, none from another page
    assert min(b[1] for b in on_page) <= y0 and y1 <= max(b[3] for b in on_page)
    cut = outline_page(store, store.catalog.resolve("two.pdf"), "Which section gives the details?", 25)
    assert [c.text for c in cut.chunks] == ["2.1 Details"]  # past the budget: the headings nearest the question

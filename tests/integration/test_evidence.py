"""The evidence controller (agents/evidence.py) on really ingested PDFs: it keeps to each of its budgets and says
which one stopped it, its moves are the same for the same inputs, a table or figure pulls in its caption (and a
caption its wordless figure), and through the ask graph with `evidence="graph"` the answer reads the opened
elements and cites an element's box; `pages_within` keeps to its budget and the page order.

The ask graph's report is conftest's `report` (its caption line "Passengers reported by operator, 2019." does
not start "Table 1", so it is a text element reached by adjacency, not a caption: the caption edge is tested on
a generated page whose captions are "Table 1. ..." and "Figure 1. ...").
"""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest
from conftest import ANSWER_PAGE, DISTRACTOR_PAGE, HYDE, NEW_QUERY, QUESTION, _ruled_table, entries, nodes_of, scripted

from docrefrag.agents.answer import PageText, page_texts
from docrefrag.agents.evidence import CHOICES, Budgets, chat_chooser, count_tokens, gather, pages_within
from docrefrag.graph.context import AskConfig

SEEDS = (ANSWER_PAGE, DISTRACTOR_PAGE, 1)  # the report's pages the controller starts from, as a search ranks them


@pytest.fixture(scope="module")
def question_vector(dr):
    return dr.embedder.embed_queries([QUESTION])[0]


def steps_of(trace: list[dict]) -> list[str]:
    """The nodes run, without the plan node's "memory" entries (graph/memory.py: they depend on earlier runs)."""
    return [n for n in nodes_of(trace) if n != "memory"]


def _steps(moves) -> list:
    return [m for m in moves if m.action in ("open", "expand")]


@pytest.mark.parametrize("tokens, steps, stopped", [
    (1000, 60, "exhausted"),  # everything above the prune line opened, well within both budgets
    (100, 60, "exhausted"),
    (20, 60, "tokens"),  # the table (18 tokens) opened; its 7-token caption line no longer fits
    (10, 60, "tokens"),  # the table is bigger than the whole budget: opened cut to it
    (1000, 5, "steps"),
    (1000, 1, "steps"),  # one open, no expand
])
def test_the_controller_keeps_to_its_budgets_and_says_which_stopped_it(dr, report, question_vector, tokens, steps,
                                                                       stopped):
    _, doc_id = report
    budgets = Budgets(tokens, steps, 5.0)
    ev = gather(dr.open_store(), QUESTION, question_vector, [(doc_id, p) for p in SEEDS], budgets)

    assert ev.stopped == stopped
    assert ev.tokens <= tokens and ev.steps <= steps and ev.seconds < 5.0
    assert ev.tokens == sum(count_tokens(p.text) for p in ev.pages) == sum(count_tokens(c.text) for p in ev.pages
                                                                           for c in p.chunks)
    assert len(_steps(ev.moves)) == ev.steps and [m.step for m in _steps(ev.moves)] == list(range(1, ev.steps + 1))
    running = [m.tokens for m in ev.moves]
    assert running == sorted(running) and running[-1] == ev.tokens
    assert ev.moves[-1].action == "stop" and ev.moves[-1].node == (doc_id, 0, 0)
    if stopped == "steps":
        assert ev.steps == steps
    opened = [m.node for m in ev.moves if m.action == "open"]
    assert sorted(opened) == ev.elements == sorted(set(opened))  # each once; reading order (page, element)
    graph = dr.open_store().graphs.get(doc_id)
    assert all(graph.nodes[k[1:]].kind not in ("page", "document") for k in ev.elements)
    # the best-scored element, the 2019 table, is opened first (cut to the budget when it is bigger)
    table = next(k for k, e in graph.nodes.items() if e.kind == "table" and k[0] == ANSWER_PAGE)
    assert opened[0] == (doc_id, *table)
    if tokens == 10:
        assert count_tokens(ev.pages[0].text) == 10 and graph.nodes[table].text.startswith(ev.pages[0].text)


def test_no_time_left_stops_at_once(dr, report, question_vector):
    _, doc_id = report
    ev = gather(dr.open_store(), QUESTION, question_vector, [(doc_id, p) for p in SEEDS], Budgets(1000, 60, 0.0))
    assert (ev.stopped, ev.steps, ev.tokens, ev.elements, ev.pages) == ("seconds", 0, 0, [], [])
    assert {m.action for m in ev.moves} <= {"activate", "stop"}


def test_the_same_inputs_give_the_same_moves(dr, report, question_vector):
    _, doc_id = report
    pages, budgets = [(doc_id, p) for p in SEEDS], Budgets(1000, 60, 5.0)
    first = gather(dr.open_store(), QUESTION, question_vector, pages, budgets)
    second = gather(dr.open_store(), QUESTION, question_vector.copy(), list(pages), budgets)
    assert first.moves == second.moves and first.elements == second.elements
    assert [(p.page, p.text) for p in first.pages] == [(p.page, p.text) for p in second.pages]
    assert {m.action for m in first.moves} >= {"activate", "open", "expand", "prune", "stop"}


def _table(dr, doc_id):
    graph = dr.open_store().graphs.get(doc_id)
    return next((doc_id, *k) for k, e in graph.nodes.items() if e.kind == "table" and k[0] == ANSWER_PAGE)


def test_a_chat_model_picks_among_the_best_scored_and_ends_the_walk(dr, report, question_vector):
    _, doc_id = report
    pages = [(doc_id, p) for p in SEEDS]
    llm, prompts = scripted("2", "0")
    ev = gather(dr.open_store(), QUESTION, question_vector, pages, Budgets(1000, 60, 5.0), chat_chooser(llm))
    assert ev.stopped == "driver" and len(ev.elements) == 1 and len(prompts) == 2
    listing = [line for line in prompts[0].splitlines() if line[:1].isdigit()]
    assert len(listing) == CHOICES and listing[0].startswith(f"1. [page {ANSWER_PAGE}, table] Operator")
    graph = dr.open_store().graphs.get(doc_id)
    (key,) = ev.elements  # the second candidate, not the best-scored table
    assert key != _table(dr, doc_id) and listing[1].startswith(f"2. [page {key[1]}, {graph.nodes[key[1:]].kind}]")
    assert "You have read 0 passages" in prompts[0] and "You have read 1 passages" in prompts[1]


@pytest.mark.parametrize("replies", [("0", "0"), ("the table, please", "0"), ("9", "0")])
def test_a_reply_naming_no_candidate_opens_the_best_scored(dr, report, question_vector, replies):
    """0 before anything was read, no number, a number past the candidates: the best-scored is opened."""
    _, doc_id = report
    llm, _ = scripted(*replies)
    ev = gather(dr.open_store(), QUESTION, question_vector, [(doc_id, p) for p in SEEDS], Budgets(1000, 60, 5.0),
                chat_chooser(llm))
    assert (ev.elements, ev.stopped) == ([_table(dr, doc_id)], "driver")


@pytest.mark.parametrize("tokens, steps, stopped", [(20, 60, "tokens"), (1000, 3, "steps")])
def test_a_chat_driven_walk_keeps_to_its_budgets(dr, report, question_vector, tokens, steps, stopped):
    _, doc_id = report
    llm, _ = scripted(*["1"] * 30)
    ev = gather(dr.open_store(), QUESTION, question_vector, [(doc_id, p) for p in SEEDS],
                Budgets(tokens, steps, 5.0), chat_chooser(llm))
    assert ev.stopped == stopped and ev.tokens <= tokens and ev.steps <= steps and ev.elements


def test_ask_with_the_chat_model_driving_the_controller(dr, report):
    llm, _ = scripted(HYDE, "1", "0", "4,812", "Yes")  # plan; gather: open the best, then enough; answer; validate
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", evidence="graph",
                                                        evidence_driver="llm"))
    (gathered,) = entries(result.trace, "gather")
    assert (gathered["driver"], gathered["stopped"], gathered["elements"]) == (
        "llm", "driver", [list(_table(dr, report[1]))])
    assert result.answer == "4812" and result.claims[0]["citations"][0]["page"] == ANSWER_PAGE


def make_captioned(path: Path) -> Path:
    """A heading and a paragraph, a ruled table with "Table 1. ..." below it, then a bar chart (no words on it)
    with "Figure 1. ..." below it, and a last paragraph."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((50, 60), "Harbour freight summary", fontsize=16)
    page.insert_textbox(pymupdf.Rect(50, 90, 545, 200),
                        "The harbour handled container and bulk freight for the regional economy. " * 3, fontsize=11)
    rows = [["Terminal", "Year", "Tonnes"], ["North quay", "2019", "7,310"], ["South quay", "2019", "5,202"]]
    _ruled_table(page, rows, 240, "Table 1. Freight handled by terminal, 2019.")
    for i, h in enumerate([60, 110, 80, 140]):
        page.draw_rect(pymupdf.Rect(80 + i * 60, 560 - h, 120 + i * 60, 560), color=(0, 0, 0), fill=(0.2, 0.4, 0.8))
    page.draw_line((70, 560), (330, 560))
    page.insert_text((50, 585), "Figure 1. Ships arriving at the harbour by month.", fontsize=10)
    page.insert_textbox(pymupdf.Rect(50, 640, 545, 760),
                        "Dredging works continued along the approach channel through the winter season. " * 3,
                        fontsize=11)
    doc.save(path)
    doc.close()
    return path


def test_a_table_pulls_in_its_caption_and_a_caption_its_figure(tmp_path, store, ingest, dr):
    (result,) = ingest(store, make_captioned(tmp_path / "freight.pdf"))
    doc_id, graph = result.doc_id, store.graphs.get(result.doc_id)
    (table,) = [k for k, e in graph.nodes.items() if e.kind == "table"]
    (figure,) = [k for k, e in graph.nodes.items() if e.kind == "figure"]
    (table_caption,) = [n for n, kind, _ in graph.out[table] if kind == "caption"]
    (figure_caption,) = [n for n, kind, _ in graph.out[figure] if kind == "caption"]
    assert graph.nodes[table_caption].text.startswith("Table 1.")
    assert graph.nodes[figure_caption].text.startswith("Figure 1.") and graph.nodes[figure].words == 0

    def walk(question: str):
        vector = dr.embedder.embed_queries([question])[0]
        return gather(store, question, vector, [(doc_id, 1)], Budgets(1000, 60, 5.0))

    def after(moves, node, action: str = "open") -> list:
        """The moves after `node`'s `action`."""
        i = next(i for i, m in enumerate(moves) if m.node == (doc_id, *node) and m.action == action)
        return moves[i + 1:]

    ev = walk("How many tonnes of freight did the North quay terminal handle in 2019?")
    opens = [m.node[1:] for m in ev.moves if m.action == "open"]
    assert opens[:2] == [table, table_caption]  # the table first, then its caption, pulled in by the caption edge
    table_open = next(m for m in ev.moves if m.action == "open")
    lift = next(m for m in after(ev.moves, table) if m.node[1:] == table_caption)
    assert (lift.action, lift.edge, lift.score) == ("activate", "caption", table_open.score)
    assert "Table 1. Freight handled by terminal, 2019." in ev.pages[0].text

    ev = walk("Which month had the most ships arriving at the harbour?")
    assert not any(m.node[1:] == figure for m in ev.moves if m.edge is None and m.action == "activate")  # no seed
    pulled = after(ev.moves, figure_caption)
    lift = next(m for m in pulled if m.node[1:] == figure)
    assert (lift.action, lift.edge) == ("activate", "caption")
    assert (doc_id, *figure) in ev.elements and (doc_id, *figure_caption) in ev.elements
    (chunk,) = [c for c in ev.pages[0].chunks if c.chunk == figure[1]]
    assert chunk.bbox == graph.nodes[figure].bbox and chunk.text == ""  # a box without words: no tokens


def test_ask_with_graph_evidence_reads_elements_and_cites_an_elements_box(dr, report):
    _, doc_id = report
    llm, seen = scripted(HYDE, "4,812", "Yes")
    config = AskConfig.of(answerer="chat", hyde="always", evidence="graph", evidence_tokens=200)
    result = dr.ask(QUESTION, llm=llm, config=config)

    assert steps_of(result.trace) == ["plan", "retrieve", "rerank", "gather", "answer", "validate"]
    (gathered,) = entries(result.trace, "gather")
    assert gathered["budgets"] == {"tokens": 200, "steps": 60, "seconds": 5.0}
    assert gathered["stopped"] in ("tokens", "steps", "seconds", "exhausted") and 0 < gathered["tokens"] <= 200
    opens = [m for m in gathered["moves"] if m["action"] == "open"]
    assert opens and {"step", "action", "node", "edge", "score", "tokens"} == set(opens[0])
    assert sorted(m["node"] for m in opens) == sorted(gathered["elements"])
    graph = dr.open_store().graphs.get(doc_id)
    by_page: dict[int, list[str]] = {}
    for _, page, el in gathered["elements"]:
        by_page.setdefault(page, []).append(graph.nodes[(page, el)].text)
    read = "\n\n".join(f"[Page {page}]\n" + "\n".join(texts) for page, texts in by_page.items())
    assert read in seen[1] and "Northfield 2019 4,812" in seen[1]  # the elements' text, not the pages' markdown
    assert "|Northfield|2019|4,812|" not in seen[1]
    (answered,) = entries(result.trace, "answer")
    assert answered["evidence"] == "graph"

    assert result.answer == "4812"
    citation = result.claims[0]["citations"][0]
    assert (citation["doc_id"], citation["page"]) == (doc_id, ANSWER_PAGE)
    element = next(e for (page, _), e in graph.nodes.items() if page == ANSWER_PAGE and "4,812" in e.text)
    assert element.kind == "table" and tuple(citation["bbox"]) == pytest.approx(element.bbox)
    assert [doc_id, ANSWER_PAGE, element.index] in gathered["elements"]


def test_the_reader_reads_the_evidence_pages_and_cites_their_elements(dr, report):
    _, doc_id = report
    llm, _ = scripted("Yes")  # the validator's reply; the reader answers
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="reader", hyde="never", max_rounds=1,
                                                        evidence="graph"))
    assert steps_of(result.trace) == ["plan", "retrieve", "rerank", "gather", "answer", "validate"]
    (gathered,) = entries(result.trace, "gather")
    (answered,) = entries(result.trace, "answer")
    assert [tuple(p) for p in answered["pages"]] == list(dict.fromkeys((d, p) for d, p, _ in gathered["elements"]))
    graph = dr.open_store().graphs.get(doc_id)
    boxes = {graph.nodes[(p, el)].bbox for _, p, el in gathered["elements"]}
    cited = [c for claim in result.claims for c in claim["citations"]]
    assert all(c["bbox"] is None or tuple(c["bbox"]) in boxes for c in cited), (cited, boxes)


def test_a_refined_round_gathers_again_and_pages_mode_is_unchanged(dr):
    llm, seen = scripted(HYDE, "Southport", "No", NEW_QUERY, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always", max_rounds=2,
                                                        evidence="graph"))
    assert steps_of(result.trace) == ["plan", "retrieve", "rerank", "gather", "answer", "validate",
                                      "refine", "retrieve", "rerank", "gather", "answer", "validate"]
    assert result.answer == "4812" and len(entries(result.trace, "gather")) == 2

    llm, seen = scripted(HYDE, "4,812", "Yes")
    result = dr.ask(QUESTION, llm=llm, config=AskConfig.of(answerer="chat", hyde="always"))
    assert steps_of(result.trace) == ["plan", "retrieve", "rerank", "answer", "validate"]  # no gather node ran
    (answered,) = entries(result.trace, "answer")
    assert answered["evidence"] == "pages" and "Northfield | Year: 2019 | Passengers: 4,812" in seen[1]


@pytest.mark.parametrize("field, value, message", [
    ("evidence", "elements", "evidence must be 'pages' or 'graph'"),
    ("evidence_tokens", 0, "evidence_tokens is a budget of the evidence controller and must be >= 1"),
    ("evidence_steps", -1, "evidence_steps is a budget"),
    ("evidence_seconds", 0.0, "evidence_seconds is the evidence controller's time budget and must be > 0"),
    ("evidence_driver", "model", "evidence_driver must be 'score' or 'llm'"),
])
def test_bad_evidence_settings_say_what_is_wrong(field, value, message):
    with pytest.raises(ValueError, match=message):
        AskConfig.of(**{field: value})


def test_the_evidence_options_reach_the_config_from_the_command_line():
    from docrefrag.cli_common import ask_config
    from docrefrag.cli_parser import build_parser

    args = build_parser().parse_args(["ask", "q", "--evidence", "graph", "--evidence-tokens", "300",
                                      "--evidence-steps", "9", "--evidence-seconds", "1.5", "--evidence-driver", "llm"])
    config = ask_config(args)
    b = config.evidence_budgets
    assert (config.reading.evidence, b.evidence_tokens, b.evidence_steps, b.evidence_seconds,
            b.evidence_driver) == ("graph", 300, 9, 1.5, "llm")
    assert AskConfig.from_values({"evidence": "graph", "evidence_seconds": 2}).evidence_budgets.evidence_seconds == 2


@pytest.mark.parametrize("budget", [0, 1, 15, 60, 10_000])
def test_pages_within_keeps_to_its_budget_and_the_page_order(dr, report, budget):
    _, doc_id = report
    pages = page_texts(dr.open_store(), [(doc_id, p) for p in (4, 2, 5, 1)], QUESTION, 1500)
    sizes = [count_tokens(p.text) for p in pages]
    cut = pages_within(pages, budget)

    assert sum(count_tokens(p.text) for p in cut) == min(budget, sum(sizes))
    assert [p.page for p in cut] == [p.page for p in pages][:len(cut)]
    assert all(isinstance(p, PageText) and p.text for p in cut)
    assert all(c.text == p.text for c, p in zip(cut[:-1], pages, strict=False))  # whole pages first
    if cut:
        assert pages[len(cut) - 1].text.startswith(cut[-1].text)  # the last one cut from its start

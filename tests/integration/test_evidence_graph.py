"""The evidence graph of a generated two-section, two-column document with a ruled table and a captioned
bar chart: its nodes and every edge are exactly the expected ones; a repeated page write or a rebuild
adds no node or edge; a store without graphs is upgraded on first use and by `docrefrag ingest --upgrade`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pymupdf
from conftest import REPO, subprocess_env

from docrefrag.indexes import evidence_graph
from docrefrag.indexes.evidence_graph import SIMILAR_K

LEFT = "Otters build dens along quiet rivers and feed on fish crabs and frogs through the long winter months."
RIGHT = "Herons wade in shallow marshes and strike at minnows with a sudden thrust of the long sharp beak."
PAGE2 = "Badgers dig wide setts under old hedges and leave them only at dusk to forage for worms and roots."
DETAILS = "Lynx hunt hares across the snow and rest on high ledges where the wind keeps the ground clear."


def make_two_sections(path: Path) -> Path:
    """Page 1: "1 Introduction" over two columns, then "2 Results" over a ruled table and a bar chart with
    its caption "Figure 1. ..."; page 2: the section goes on, then "2.1 Details" and its paragraph."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_text((50, 60), "1 Introduction", fontsize=18)
    page.insert_textbox(pymupdf.Rect(50, 90, 280, 260), (LEFT + " ") * 3, fontsize=10)
    page.insert_textbox(pymupdf.Rect(315, 90, 545, 260), (RIGHT + " ") * 3, fontsize=10)
    page.insert_text((50, 300), "2 Results", fontsize=18)
    rows = [["Animal", "Site", "Count"], ["otter", "north", "12"], ["heron", "south", "31"]]
    for i, row in enumerate(rows):
        for j, cell in enumerate(row):
            page.insert_text((60 + j * 160, 320 + i * 22 + 15), cell, fontsize=11)
        page.draw_line((55, 320 + i * 22), (535, 320 + i * 22))
    page.draw_line((55, 386), (535, 386))
    for j in range(4):
        page.draw_line((55 + j * 160, 320), (55 + j * 160, 386))
    for i, h in enumerate([60, 110, 80, 140]):
        page.draw_rect(pymupdf.Rect(80 + i * 60, 600 - h, 120 + i * 60, 600), color=(0, 0, 0), fill=(0.2, 0.4, 0.8))
    page.draw_line((70, 600), (330, 600))
    page.insert_text((50, 625), "Figure 1. Sightings of each animal by month.", fontsize=10)
    page = doc.new_page(width=595, height=842)
    page.insert_textbox(pymupdf.Rect(50, 50, 545, 120), (PAGE2 + " ") * 2, fontsize=10)
    page.insert_text((50, 160), "2.1 Details", fontsize=14)
    page.insert_textbox(pymupdf.Rect(50, 180, 545, 260), (DETAILS + " ") * 2, fontsize=10)
    doc.save(path)
    doc.close()
    return path


# (label, kind, heading level, the text's start) of each element in reading order
ELEMENTS = {
    (1, 1): ("intro", "heading", 1, "1 Introduction"),
    (1, 2): ("left", "text", None, LEFT[:30]),
    (1, 3): ("right", "text", None, RIGHT[:30]),
    (1, 4): ("results", "heading", 1, "2 Results"),
    (1, 5): ("table", "table", None, "Animal Site Count otter north 12"),
    (1, 6): ("chart", "figure", None, ""),
    (1, 7): ("caption", "caption", None, "Figure 1. Sightings"),
    (2, 1): ("more", "text", None, PAGE2[:30]),
    (2, 2): ("details", "heading", 2, "2.1 Details"),
    (2, 3): ("lynx", "text", None, DETAILS[:30]),
}
EDGES = {
    *(("page1", "contains", e) for e in ("intro", "left", "right", "results", "table", "chart", "caption")),
    *(("page2", "contains", e) for e in ("more", "details", "lynx")),
    # reading order: the heading, the left column, the right column, then the second section; on to page 2
    *((a, "next", b) for a, b in (("intro", "left"), ("left", "right"), ("right", "results"), ("results", "table"),
                                  ("table", "chart"), ("chart", "caption"), ("caption", "more"), ("more", "details"),
                                  ("details", "lynx"))),
    # within 18 pt and overlapping across the gap (the columns are 37 pt apart; the headings 25 pt above)
    ("results", "adjacent", "table"), ("chart", "adjacent", "caption"), ("details", "adjacent", "lynx"),
    ("chart", "caption", "caption"),
    # the section tree: two top-level sections, the second spanning page 2 and holding "2.1 Details"
    ("document", "section", "intro"), ("document", "section", "results"),
    ("intro", "section", "left"), ("intro", "section", "right"),
    *(("results", "section", e) for e in ("table", "chart", "caption", "more", "details")),
    ("details", "section", "lynx"),
}


def _graph(store, doc_id):
    graph = store.graphs.get(doc_id)
    labels = {(0, 0): "document", (1, 0): "page1", (2, 0): "page2"} | {n: v[0] for n, v in ELEMENTS.items()}
    return graph, labels


def test_the_graph_of_a_two_section_two_column_page_is_exactly_the_expected_one(tmp_path, store, ingest,
                                                                                 check_consistent):
    (result,) = ingest(store, make_two_sections(tmp_path / "two.pdf"))
    graph, labels = _graph(store, result.doc_id)
    assert set(graph.nodes) == set(labels)
    for node, (_, kind, level, start) in ELEMENTS.items():
        e = graph.nodes[node]
        assert (e.kind, e.level, e.text[:len(start)]) == (kind, level, start), (node, e)
    assert graph.nodes[(1, 5)].bbox == (55.0, 320.0, 535.0, 386.0)  # cut to its ruling: "2 Results" is not in it
    edges = [(labels[a], kind, labels[b], w) for a, out in graph.out.items() for b, kind, w in out]
    assert {(a, k, b) for a, k, b, _ in edges if k != "similar"} == EDGES
    assert len([e for e in edges if e[1] != "similar"]) == len(EDGES)  # each edge once
    assert [graph.depth(h) for h in graph.headings()] == [1, 1, 2]

    # semantic neighbours: each element with words has its SIMILAR_K nearest elements on the other page
    similar = [(a, b, w) for a, k, b, w in edges if k == "similar"]
    worded = {n for n in ELEMENTS if graph.nodes[n].words >= 3}
    for node in worded:
        targets = [(b, w) for a, b, w in similar if a == labels[node]]
        others = [n for n in worded if n[0] != node[0]]
        assert len(targets) == min(SIMILAR_K, len(others)), (node, targets)
        page_of = {labels[n]: n[0] for n in ELEMENTS}
        assert all(page_of[b] != node[0] and -1 <= w <= 1 for b, w in targets)
        cosines = {labels[n]: float(graph.vectors[node] @ graph.vectors[n]) for n in others}
        assert {b for b, _ in targets} == set(sorted(cosines, key=cosines.get)[-len(targets):])
    assert all(np.isclose(np.linalg.norm(graph.vectors[n]), 1.0, atol=1e-2) for n in worded)
    assert "chart" not in {a for a, _, _ in similar}  # no words: no embedding, no neighbours
    check_consistent(store)


def test_rewriting_a_page_and_rebuilding_add_no_node_or_edge(tmp_path, store, ingest, check_consistent):
    (result,) = ingest(store, make_two_sections(tmp_path / "two.pdf"))
    doc_id, db = result.doc_id, store.db

    def rows() -> tuple[list, list]:
        return (db.execute("SELECT * FROM elements WHERE doc_id = ? ORDER BY page, element", (doc_id,)).fetchall(),
                db.execute("SELECT * FROM edges WHERE doc_id = ? ORDER BY 2, 3, 4, 5, 6", (doc_id,)).fetchall())

    before = rows()
    record, tokens = store.pages.get(doc_id, 1), store.pages.tokens(doc_id, 1)
    with db:  # what a resumed ingest does to a page it writes again
        evidence_graph.write_page(db, doc_id, 1, record.width, record.height, record.words, record.blocks,
                                  record.markdown, tokens.tokens, tokens.word_counts, store.meta.text_dim)
    assert not evidence_graph.built(db, doc_id)  # the document-level edges are due again
    with db:
        evidence_graph.finish(db, doc_id)
    assert rows() == before
    evidence_graph.rebuild(db, doc_id, store.meta.text_dim)
    assert rows() == before
    check_consistent(store)


def test_a_store_without_graphs_is_upgraded_on_first_use_and_by_ingest_upgrade(tmp_path, store, ingest):
    (result,) = ingest(store, make_two_sections(tmp_path / "two.pdf"))
    doc_id, db = result.doc_id, store.db
    count = "SELECT (SELECT COUNT(*) FROM elements), (SELECT COUNT(*) FROM edges), (SELECT COUNT(*) FROM graphs)"
    built = db.execute(count).fetchone()

    def forget() -> None:  # a store ingested before the graph existed
        with db:
            for table in ("elements", "edges", "graphs"):
                db.execute(f"DELETE FROM {table}")

    forget()
    graph, labels = _graph(store, doc_id)  # first use builds it
    assert set(graph.nodes) == set(labels) and db.execute(count).fetchone() == built

    forget()
    command = [sys.executable, "-m", "docrefrag", "ingest", "--upgrade", "--store", str(store.root), "--json"]
    run = subprocess.run(command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [{"upgraded": ["two.pdf"]}]
    assert db.execute(count).fetchone() == built
    again = subprocess.run(command[:-1], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "upgraded   0 document(s)" in again.stdout and "all were current" in again.stdout

    bare = subprocess.run([*command[:4], "--store", str(store.root)],
                          cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert bare.returncode == 2 and "give a PDF" in bare.stderr and "Traceback" not in bare.stderr

"""The evidence graph of a document (MAGE-RAG): page and element nodes and their edges, in the catalog.

Nodes are (page, element): (0, 0) the document, (p, 0) page p, (p, i >= 1) its elements in reading order
(indexes/elements.py). Ingest writes each page's nodes and page-level edges in the page's own transaction
(`write_page`), so a resumed ingest rewrites a page rather than adding to it; `finish` then writes the
document-level edges in one transaction, replacing any from before:

    section   a heading (or the document) -> each element under it, headings nested by level: a level
              from the page ("#" count, numbering) or else from the heading's type size ranked among the
              document's heading sizes; a section spans pages until the next heading of its level or above
    next      the last element of a page -> the first of the next page (reading order across pages)
    similar   each element -> its SIMILAR_K nearest elements on other pages by cosine of the embeddings

A store ingested before the graph existed is upgraded on first use (`DocumentGraph.load`) or by
`docrefrag ingest --upgrade`: the graph is rebuilt from the stored pages and tokens, no re-parsing.
GRAPH_VERSION changes whenever the built graph would; an older graph is rebuilt the same way.
Its tables (`SCHEMA`: elements, edges, graphs) are read and written here only: the ingest's writes by the
functions below (inside the transactions of indexes/page_table.py and indexes/catalog.py), the reads by
`EvidenceGraphs`, the Store's part `store.graphs`, which keeps each document's graph for a store generation.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from docrefrag.core.page import Block, Word
from docrefrag.indexes.elements import Edge, Element, page_elements

if TYPE_CHECKING:
    from docrefrag.indexes.catalog import DocInfo, Meta

GRAPH_VERSION = 1
SIMILAR_K = 3
MIN_SIMILAR_WORDS = 3  # shorter elements (page numbers, labels) get no semantic neighbours
Node = tuple[int, int]
ROOT: Node = (0, 0)

SCHEMA = """
CREATE TABLE IF NOT EXISTS elements (
    doc_id TEXT NOT NULL, page INTEGER NOT NULL, element INTEGER NOT NULL, kind TEXT NOT NULL, level INTEGER,
    size REAL NOT NULL, x0 REAL NOT NULL, y0 REAL NOT NULL, x1 REAL NOT NULL, y1 REAL NOT NULL, text TEXT NOT NULL,
    words INTEGER NOT NULL, embedding BLOB NOT NULL, PRIMARY KEY (doc_id, page, element)
);
CREATE TABLE IF NOT EXISTS edges (
    doc_id TEXT NOT NULL, src_page INTEGER NOT NULL, src INTEGER NOT NULL, dst_page INTEGER NOT NULL,
    dst INTEGER NOT NULL, kind TEXT NOT NULL, weight REAL NOT NULL, scope TEXT NOT NULL,
    PRIMARY KEY (doc_id, src_page, src, dst_page, dst, kind)
);
CREATE TABLE IF NOT EXISTS graphs (doc_id TEXT PRIMARY KEY, version INTEGER NOT NULL);
"""


def delete(db: sqlite3.Connection, doc_id: str) -> None:
    """Remove the document's graph (in the caller's transaction)."""
    for table in ("elements", "edges", "graphs"):
        db.execute(f"DELETE FROM {table} WHERE doc_id = ?", (doc_id,))


def write_page(db: sqlite3.Connection, doc_id: str, page: int, width: float, height: float, words: list[Word],
               blocks: list[Block], markdown: str, tokens: np.ndarray | None, word_counts: np.ndarray | None,
               text_dim: int, failed: bool = False) -> None:
    """The page's nodes and page-level edges (inside the caller's transaction), replacing any it had; a
    failed page (`failed`) gets none. The document's graph is marked unbuilt until `finish` runs again."""
    db.execute("DELETE FROM elements WHERE doc_id = ? AND page = ?", (doc_id, page))
    db.execute("DELETE FROM edges WHERE doc_id = ? AND scope = 'page' AND src_page = ?", (doc_id, page))
    db.execute("DELETE FROM graphs WHERE doc_id = ?", (doc_id,))
    if failed:
        return
    elements, vectors, edges = page_elements(page, width, height, words, blocks, markdown, tokens, word_counts,
                                             text_dim)
    db.executemany("INSERT INTO elements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [(doc_id, e.page, e.index, e.kind, e.level, e.size, *e.bbox, e.text, e.words,
                     v.astype(np.float16).tobytes()) for e, v in zip(elements, vectors, strict=True)])
    _insert_edges(db, doc_id, edges, "page")


def finish(db: sqlite3.Connection, doc_id: str) -> None:
    """The document-level edges (inside the caller's transaction)."""
    rows = db.execute("SELECT page, element, kind, level, size, words, embedding FROM elements "
                      "WHERE doc_id = ? AND page > 0 ORDER BY page, element", (doc_id,)).fetchall()
    db.execute("DELETE FROM edges WHERE doc_id = ? AND scope = 'document'", (doc_id,))
    db.execute("DELETE FROM elements WHERE doc_id = ? AND page = 0", (doc_id,))
    db.execute("INSERT INTO elements VALUES (?, 0, 0, 'document', NULL, 0, 0, 0, 0, 0, '', 0, ?)",
               (doc_id, b""))
    items = [r for r in rows if r[1] > 0]
    edges = _section_edges(items) + _page_order_edges(items) + _similar_edges(items)
    _insert_edges(db, doc_id, edges, "document")
    db.execute("INSERT OR REPLACE INTO graphs VALUES (?, ?)", (doc_id, GRAPH_VERSION))


def built(db: sqlite3.Connection, doc_id: str) -> bool:
    row = db.execute("SELECT version FROM graphs WHERE doc_id = ?", (doc_id,)).fetchone()
    return row is not None and row[0] == GRAPH_VERSION


def rebuild(db: sqlite3.Connection, doc_id: str, text_dim: int) -> None:
    """The whole graph again from the stored pages and tokens, in one transaction."""
    with db:
        pages = db.execute("SELECT p.page, p.width, p.height, p.words, p.blocks, p.markdown, t.tokens, "
                           "t.word_counts FROM pages p LEFT JOIN tokens t ON t.doc_id = p.doc_id AND t.page = p.page "
                           "WHERE p.doc_id = ? AND p.error IS NULL ORDER BY p.page", (doc_id,)).fetchall()
        for page, width, height, words, blocks, markdown, tokens, counts in pages:
            wc = np.frombuffer(counts, np.int32) if counts is not None else None
            tok = np.frombuffer(tokens, np.float16).reshape(len(wc), -1) if wc is not None else None
            write_page(db, doc_id, page, width, height, [Word(*w) for w in json.loads(words)],
                       [Block(*b) for b in json.loads(blocks)], markdown, tok, wc, text_dim)
        finish(db, doc_id)


def _insert_edges(db: sqlite3.Connection, doc_id: str, edges: list[Edge], scope: str) -> None:
    db.executemany("INSERT OR REPLACE INTO edges VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   [(doc_id, *e.src, *e.dst, e.kind, e.weight, scope) for e in edges])


def _section_edges(items: list[tuple]) -> list[Edge]:
    sizes = sorted({round(r[4] * 2) / 2 for r in items if r[2] == "heading" and r[3] is None}, reverse=True)
    stack: list[tuple[int, Node]] = []  # (level, heading node), levels increasing
    edges = []
    for page, element, kind, level, size, *_ in items:
        node = (page, element)
        if kind == "heading":
            level = level or sizes.index(round(size * 2) / 2) + 1
            while stack and stack[-1][0] >= level:
                stack.pop()
            edges.append(Edge(stack[-1][1] if stack else ROOT, node, "section"))
            stack.append((level, node))
        else:
            edges.append(Edge(stack[-1][1] if stack else ROOT, node, "section"))
    return edges


def _page_order_edges(items: list[tuple]) -> list[Edge]:
    first: dict[int, Node] = {}
    last: dict[int, Node] = {}
    for page, element, *_ in items:
        first.setdefault(page, (page, element))
        last[page] = (page, element)
    pages = sorted(first)
    return [Edge(last[a], first[b], "next") for a, b in zip(pages, pages[1:], strict=False)]


def _similar_edges(items: list[tuple]) -> list[Edge]:
    keep = [r for r in items if r[5] >= MIN_SIMILAR_WORDS and r[6]]
    if len(keep) < 2:
        return []
    vectors = np.stack([np.frombuffer(r[6], np.float16).astype(np.float32) for r in keep])
    alive = np.linalg.norm(vectors, axis=1) > 0
    pages = np.array([r[0] for r in keep])
    edges = []
    for start in range(0, len(keep), 1024):  # bounded memory on a long document
        sims = vectors[start:start + 1024] @ vectors.T
        sims[pages[start:start + 1024, None] == pages[None, :]] = -np.inf  # other pages only
        sims[:, ~alive] = -np.inf
        k = min(SIMILAR_K, len(keep) - 1)
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k] if k > 0 else np.zeros((len(sims), 0), int)
        for row, cols in enumerate(top):
            i = start + row
            if not alive[i]:
                continue
            for j in cols:
                if np.isfinite(sims[row, j]):
                    edges.append(Edge((keep[i][0], keep[i][1]), (keep[j][0], keep[j][1]), "similar",
                                      round(float(sims[row, j]), 4)))
    return edges


@dataclass
class DocumentGraph:
    """A document's graph in memory, for the evidence controller and the structure tools."""

    doc_id: str
    nodes: dict[Node, Element]
    vectors: dict[Node, np.ndarray]
    out: dict[Node, list[tuple[Node, str, float]]] = field(default_factory=lambda: defaultdict(list))
    into: dict[Node, list[tuple[Node, str, float]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def load(cls, db: sqlite3.Connection, doc_id: str, text_dim: int) -> DocumentGraph:
        """Read the graph, building or upgrading it first when it is missing or of an older version."""
        if not built(db, doc_id):
            rebuild(db, doc_id, text_dim)
        nodes, vectors = {}, {}
        for page, el, kind, level, size, x0, y0, x1, y1, text, words, emb in db.execute(
                "SELECT page, element, kind, level, size, x0, y0, x1, y1, text, words, embedding FROM elements "
                "WHERE doc_id = ?", (doc_id,)):
            nodes[(page, el)] = Element(page, el, kind, (x0, y0, x1, y1), text, words, level, size)
            if emb:
                vectors[(page, el)] = np.frombuffer(emb, np.float16).astype(np.float32)
        graph = cls(doc_id, nodes, vectors)
        for sp, s, dp, d, kind, weight in db.execute(
                "SELECT src_page, src, dst_page, dst, kind, weight FROM edges WHERE doc_id = ?", (doc_id,)):
            graph.out[(sp, s)].append(((dp, d), kind, weight))
            graph.into[(dp, d)].append(((sp, s), kind, weight))
        for lists in (graph.out, graph.into):
            for edges in lists.values():
                edges.sort()
        return graph

    def children(self, node: Node) -> list[Node]:
        """The elements directly under a section heading (or the document), in reading order."""
        return sorted(n for n, kind, _ in self.out.get(node, []) if kind == "section")

    def section_of(self, node: Node) -> Node:
        return next((n for n, kind, _ in self.into.get(node, []) if kind == "section"), ROOT)

    def headings(self) -> list[Node]:
        return sorted(n for n, e in self.nodes.items() if e.kind == "heading")

    def depth(self, node: Node) -> int:
        """1 for a top-level heading, 2 under it, ..."""
        depth = 0
        while node != ROOT:
            node, depth = self.section_of(node), depth + 1
        return depth

    def neighbours(self, node: Node, kinds: tuple[str, ...] | None = None) -> list[tuple[Node, str, float]]:
        """(node, edge kind, weight) of the edges at `node` in either direction ("next" forward only,
        "contains" and "section" down only), optionally of some kinds."""
        found = [(n, k, w) for n, k, w in self.out.get(node, [])]
        found += [(n, k, w) for n, k, w in self.into.get(node, []) if k in ("adjacent", "similar", "caption")]
        return [f for f in found if kinds is None or f[1] in kinds]


class EvidenceGraphs:
    """The evidence graphs of a store's documents, each read once per store generation."""

    def __init__(self, db: sqlite3.Connection, meta: Meta) -> None:
        self.db, self.meta = db, meta
        self.db.executescript(SCHEMA)
        self._graphs: dict[str, tuple[int, DocumentGraph]] = {}

    def get(self, doc_id: str) -> DocumentGraph:
        """The document's evidence graph (built from the stored pages first when the document was ingested
        before the graph existed)."""
        generation = self.meta.generation
        cached = self._graphs.get(doc_id)
        if cached is None or cached[0] != generation:
            self._graphs[doc_id] = (generation, DocumentGraph.load(self.db, doc_id, self.meta.text_dim))
        return self._graphs[doc_id][1]

    def upgrade(self, documents: list[DocInfo]) -> list[str]:
        """Rebuild the graph of each ready one of `documents` whose graph is missing or older; their names."""
        done = []
        for d in documents:
            if d.status == "ready" and not built(self.db, d.doc_id):
                rebuild(self.db, d.doc_id, self.meta.text_dim)
                done.append(d.name)
        return done

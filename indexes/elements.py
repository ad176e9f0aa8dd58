"""A page's elements and the edges between them: the page-level part of the evidence graph.

From what ingest already keeps of a page (words with boxes and text-layer block numbers, layout blocks,
markdown, the page tokens): one element per table (its words), per figure (an image, or a vector drawing
of at least FIGURE_MIN_AREA of the page; the words on it are its labels), per caption (a text block that
starts "Figure 3", "Table 2", ...), per heading (a markdown "#" line of pymupdf4llm's size-ranked
headers, a numbered title such as "2.1 Methods", or a short line set in type at least HEADING_SIZE times
the page's body size) and per other text block. An element's embedding is the word-weighted mean of
the text states of the page-token cells its words fall in: the dense branch's space, so a question's
query vector scores it, and no model runs again.

Edges on the page: "contains" (page node -> element), "next" (reading order, by recursive XY-cut: across a
gap in the rows first, then in the columns), "adjacent" (boxes within ADJACENT_GAP points, overlapping
across the gap; one edge per pair, either direction), "caption" (figure or table -> its nearest caption).
The document-level edges (sections, cross-page order, semantic neighbours) are in indexes/evidence_graph.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from docrefrag.core.chunking import box_overlap
from docrefrag.core.page import Block, Word

ElementKind = str  # "page", "heading", "text", "table", "figure", "caption" ("document" for the root node)
FIGURE_MIN_AREA = 0.02  # of the page: smaller drawings are rules, bullets and logos
BACKGROUND_AREA = 0.6  # a drawing or image covering more of the page is a background, not a figure
HEADING_SIZE = 1.25
HEADING_MAX_WORDS = 15
ADJACENT_GAP = 18.0  # points, about one and a half lines of body text
CAPTION = re.compile(r"^(?:figure|fig\.?|table|chart|exhibit|graph|diagram)\s*[\dIVX]+[a-z]?\b", re.I)
NUMBERED = re.compile(r"^((?:\d+\.)*\d+)\.?\s+[A-Z]")  # "2 Methods", "2.1. Data", not "3 of them"

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Element:
    page: int
    index: int  # 0: the page node; elements from 1, in reading order
    kind: ElementKind
    bbox: Box
    text: str
    words: int
    level: int | None = None  # a heading's depth (1 = top), when the page itself tells it ("#" count, numbering)
    size: float = 0.0  # a heading's median word height in points (ranks size-only headings across the document)


@dataclass(frozen=True)
class Edge:
    src: tuple[int, int]  # (page, element)
    dst: tuple[int, int]
    kind: str
    weight: float = 1.0


def page_elements(page: int, width: float, height: float, words: list[Word], blocks: list[Block], markdown: str,
                  tokens: np.ndarray | None, word_counts: np.ndarray | None,
                  text_dim: int) -> tuple[list[Element], np.ndarray, list[Edge]]:
    """(elements with the page node first, their embeddings (n, text_dim) float32, L2-normalised or zero,
    the page's edges)."""
    area = width * height
    drawings = [_box(b) for b in blocks if b.kind == "drawing"]
    containers = [("table", _ruled(_box(b), drawings)) for b in blocks if b.kind == "table"]
    containers += [("figure", _box(b)) for b in blocks if b.kind in ("figure", "drawing")
                   and FIGURE_MIN_AREA * area <= _area(_box(b)) <= BACKGROUND_AREA * area]
    containers = _drop_nested(containers)
    body = float(np.median([w.y1 - w.y0 for w in words])) if words else 0.0
    headers = _markdown_headers(markdown)
    text_blocks: dict[int, list[Word]] = {}
    for w in words:
        text_blocks.setdefault(w.block, []).append(w)
    inside: list[list[Word]] = [[] for _ in containers]
    raw: list[tuple[ElementKind, Box, list[Word]]] = []
    levels: dict[int, int | None] = {}
    for ws in text_blocks.values():
        kind, level = _text_kind(" ".join(w.text for w in ws), ws, body, headers)
        rest = []
        for w in ws if kind == "text" else []:  # a heading or caption is never part of a table or figure
            box = next((i for i, (_, c) in enumerate(containers) if _centre_in(w, c)), None)
            (inside[box] if box is not None else rest).append(w)
        if kind != "text" or rest:
            levels[len(raw)] = level
            raw.append((kind, _words_box(rest or ws), rest or ws))
    for (kind, box), ws in zip(containers, inside, strict=True):
        raw.append((kind, box if not ws else _union([box, _words_box(ws)]), ws))
    order = _reading_order([box for _, box, _ in raw])
    elements = [Element(page, 0, "page", (0.0, 0.0, width, height), "", len(words))]
    for n, i in enumerate(order, start=1):
        kind, box, ws = raw[i]
        size = float(np.median([w.y1 - w.y0 for w in ws])) if kind == "heading" and ws else 0.0
        elements.append(Element(page, n, kind, tuple(round(v, 2) for v in box), " ".join(w.text for w in ws),
                                len(ws), levels.get(i), round(size, 2)))
    vectors = _embeddings(elements, words, width, height, tokens, word_counts, text_dim)
    return elements, vectors, _page_edges(elements)


def _text_kind(text: str, ws: list[Word], body: float, headers: dict[str, int]) -> tuple[ElementKind, int | None]:
    if CAPTION.match(text):
        return "caption", None
    key = _normal(text)
    short = len(ws) <= HEADING_MAX_WORDS and not text.rstrip().endswith((".", ",", ";", ":"))
    numbered = NUMBERED.match(text)
    if key in headers:
        return "heading", numbered.group(1).count(".") + 1 if numbered else headers[key]
    if short and numbered and len(numbered.group(1).split(".")) <= 4:
        return "heading", numbered.group(1).count(".") + 1
    size = float(np.median([w.y1 - w.y0 for w in ws]))
    if short and body > 0 and size >= HEADING_SIZE * body:
        return "heading", None  # level from its size among the document's headings (evidence_graph)
    return "text", None


def _markdown_headers(markdown: str) -> dict[str, int]:
    """Normalised text of each "#" line -> its level."""
    out = {}
    for line in markdown.splitlines():
        m = re.match(r"^(#{1,6})\s+(.*)$", line.strip())
        if m:
            out.setdefault(_normal(re.sub(r"[*_`]", "", m.group(2))), len(m.group(1)))
    return out


def _normal(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _reading_order(boxes: list[Box]) -> list[int]:
    """Indices of `boxes` in reading order, by recursive XY-cut: split at a horizontal gap no box crosses
    (top part first), else at a vertical gap (left part first), else top to bottom."""

    def groups(items: list[int], lo: int, hi: int) -> list[list[int]]:
        out: list[list[int]] = []
        end = -np.inf
        for i in sorted(items, key=lambda i: boxes[i][lo]):
            if boxes[i][lo] > end + 1.0 or not out:  # a gap of more than a point starts a new group
                out.append([])
            out[-1].append(i)
            end = max(end, boxes[i][hi])
        return out

    def cut(items: list[int]) -> list[int]:
        if len(items) <= 1:
            return items
        for lo, hi in ((1, 3), (0, 2)):
            parts = groups(items, lo, hi)
            if len(parts) > 1:
                return [i for part in parts for i in cut(part)]
        return sorted(items, key=lambda i: (boxes[i][1], boxes[i][0]))

    return cut(list(range(len(boxes))))


def _page_edges(elements: list[Element]) -> list[Edge]:
    page = elements[0].page
    items = elements[1:]
    edges = [Edge((page, 0), (page, e.index), "contains") for e in items]
    edges += [Edge((page, a.index), (page, b.index), "next") for a, b in zip(items, items[1:], strict=False)]
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if _adjacent(a.bbox, b.bbox):
                edges.append(Edge((page, a.index), (page, b.index), "adjacent"))
    captions = [c for c in items if c.kind == "caption"]
    for c in captions:  # each caption to the nearest figure or table (one caption per target at most)
        targets = [t for t in items if t.kind in ("figure", "table")]
        if targets:
            t = min(targets, key=lambda t: _gap(t.bbox, c.bbox))
            if _gap(t.bbox, c.bbox) <= 4 * ADJACENT_GAP:
                edges.append(Edge((page, t.index), (page, c.index), "caption"))
    return edges


def _embeddings(elements: list[Element], words: list[Word], width: float, height: float, tokens: np.ndarray | None,
                word_counts: np.ndarray | None, text_dim: int) -> np.ndarray:
    out = np.zeros((len(elements), text_dim), np.float32)
    if tokens is None or word_counts is None or not words:
        return out
    grid = int(round(len(word_counts) ** 0.5))
    text = tokens[:, :text_dim].astype(np.float32)
    for n, e in enumerate(elements):
        cells = [_cell(w, width, height, grid) for w in words if e.kind == "page" or _centre_in(w, e.bbox)]
        cells = [c for c in cells if word_counts[c] > 0]
        if cells:
            v = text[cells].mean(axis=0)  # each word counts once: a cell with more of the element's words weighs more
            norm = float(np.linalg.norm(v))
            out[n] = v / norm if norm > 0 else v
    return out


def _cell(w: Word, width: float, height: float, grid: int) -> int:
    col = min(max(int((w.x0 + w.x1) / 2 / width * grid), 0), grid - 1)
    row = min(max(int((w.y0 + w.y1) / 2 / height * grid), 0), grid - 1)
    return row * grid + col


def _ruled(table: Box, drawings: list[Box]) -> Box:
    """A table's box cut to its ruling (the largest drawing inside it, when that covers half of it): the
    table finder's box may take in the heading above the table."""
    ruling = [d for d in drawings if box_overlap(d, table) > 0.95 and _area(d) >= 0.5 * _area(table)]
    return max(ruling, key=_area) if ruling else table


def _drop_nested(containers: list[tuple[str, Box]]) -> list[tuple[str, Box]]:
    """Tables first; a figure mostly inside a table or inside a larger figure is part of it."""
    kept: list[tuple[str, Box]] = []
    for kind, box in sorted(containers, key=lambda c: (c[0] != "table", -_area(c[1]))):
        if not any(box_overlap(box, other) > 0.6 for _, other in kept):
            kept.append((kind, box))
    return kept


def _adjacent(a: Box, b: Box) -> bool:
    h_overlap = min(a[2], b[2]) - max(a[0], b[0])
    v_overlap = min(a[3], b[3]) - max(a[1], b[1])
    v_gap = max(a[1], b[1]) - min(a[3], b[3])
    h_gap = max(a[0], b[0]) - min(a[2], b[2])
    return (h_overlap > 0 and v_gap <= ADJACENT_GAP) or (v_overlap > 0 and h_gap <= ADJACENT_GAP)


def _gap(a: Box, b: Box) -> float:
    return max(0.0, max(a[0], b[0]) - min(a[2], b[2])) + max(0.0, max(a[1], b[1]) - min(a[3], b[3]))


def _box(b: Block) -> Box:
    return b.x0, b.y0, b.x1, b.y1


def _area(b: Box) -> float:
    return max(b[2] - b[0], 0.0) * max(b[3] - b[1], 0.0)


def _union(boxes: list[Box]) -> Box:
    return min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes)


def _words_box(ws: list[Word]) -> Box:
    return _union([(w.x0, w.y0, w.x1, w.y1) for w in ws])


def _centre_in(w: Word, box: Box) -> bool:
    cx, cy = (w.x0 + w.x1) / 2, (w.y0 + w.y1) / 2
    return box[0] <= cx <= box[2] and box[1] <= cy <= box[3]

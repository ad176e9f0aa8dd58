"""Drawing the pages of the synthetic documents with PyMuPDF, and writing them to PDF.

Helvetica text measurement and word wrap, an `Ink` that draws one region and records its text (in
reading order) and its extent, fitting prose into a box, ruled tables, bar and line charts, and
`save_pdf`, which writes the same bytes for the same seed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from docrefrag.core.pdf import pymupdf
from docrefrag.core.synthetic import Region

A4 = (595.0, 842.0)
_LINE = 1.2  # line height in em


@functools.cache
def _advances() -> dict[str, float]:
    """Helvetica advance widths of the printable ASCII characters, in em (all the text drawn here)."""
    font = pymupdf.Font("helv")
    return {chr(c): font.glyph_advance(c) for c in range(32, 127)}


def _width(text: str, fontsize: float) -> float:
    """pymupdf.get_text_length(text, "helv", fontsize), 30 times faster."""
    advances = _advances()
    return fontsize * sum(advances[c] for c in text)


def _wrap(text: str, width: float, fontsize: float) -> list[str]:
    """Greedy word wrap in Helvetica: the lines of `text`, each at most `width` wide where words allow."""
    space = _width(" ", fontsize)
    lines = []
    for paragraph in text.split("\n"):
        words, used = [], 0.0
        for word in paragraph.split():
            w = _width(word, fontsize)
            if words and used + space + w > width:
                lines.append(" ".join(words))
                words, used = [], 0.0
            used += w + (space if words else 0.0)
            words.append(word)
        lines.append(" ".join(words))
    return lines


class Ink:
    """Draws one region on a page and records its text, in drawing order, and its extent."""

    def __init__(self, page: pymupdf.Page) -> None:
        self.page, self.parts, self.rect = page, [], None

    def _grow(self, rect: pymupdf.Rect) -> None:
        self.rect = pymupdf.Rect(rect) if self.rect is None else self.rect | rect

    def text(self, point: tuple[float, float], text: str, fontsize: float, color=None) -> None:
        self.page.insert_text(point, text, fontsize=fontsize, color=color)
        self._grow(pymupdf.Rect(point[0], point[1] - 1.075 * fontsize, point[0] + _width(text, fontsize),
                                point[1] + 0.3 * fontsize))
        self.parts.append(text)

    def flow(self, rect: pymupdf.Rect, text: str, fontsize: float) -> bool:
        """Word-wrap `text` (its newlines kept) to the width of `rect` and draw it from the top, 1.2 em a
        line; False, drawing nothing, when it is taller than `rect`. (insert_textbox is not used: its
        lines run up to 50 pt past the box on long text.)"""
        lines = _wrap(text, rect.width, fontsize)
        step = _LINE * fontsize
        if len(lines) * step > rect.height:
            return False
        for i, line in enumerate(lines):
            baseline = rect.y0 + 1.075 * fontsize + i * step
            self.page.insert_text((rect.x0, baseline), line, fontsize=fontsize)
            self._grow(pymupdf.Rect(rect.x0, baseline - 1.075 * fontsize, rect.x0 + _width(line, fontsize),
                                    baseline + 0.3 * fontsize))
        self.parts.append(text)
        return True

    def line(self, p: tuple[float, float], q: tuple[float, float], **style) -> None:
        self.page.draw_line(p, q, **style)
        self._grow(pymupdf.Rect(min(p[0], q[0]), min(p[1], q[1]), max(p[0], q[0]), max(p[1], q[1])))

    def box(self, rect: pymupdf.Rect, **style) -> None:
        self.page.draw_rect(rect, **style)
        self._grow(rect)

    def dot(self, center: tuple[float, float], radius: float, **style) -> None:
        self.page.draw_circle(center, radius, **style)
        self._grow(pymupdf.Rect(center[0] - radius, center[1] - radius, center[0] + radius, center[1] + radius))

    def region(self, role: str) -> Region:
        r = self.rect
        return Region((r.x0 - 2, r.y0 - 2, r.x1 + 2, r.y1 + 2), "\n".join(self.parts), role)


def draw_table(ink: Ink, rows: list[list[str]], x0: float, top: float, widths: Sequence[float],
                row_h: float = 22.0, fontsize: float = 11.0) -> float:
    """A ruled table: a rule above each row and below the last, one at each column edge. Returns its bottom."""
    edges = [x0 + sum(widths[:j]) for j in range(len(widths) + 1)]
    bottom = top + len(rows) * row_h
    for i, row in enumerate(rows):
        y = top + i * row_h
        for j, cell in enumerate(row):
            ink.text((edges[j] + 5, y + row_h - 7), cell, fontsize)
        ink.line((x0, y), (edges[-1], y))
    ink.line((x0, bottom), (edges[-1], bottom))
    for x in edges:
        ink.line((x, top), (x, bottom))
    return bottom


def draw_bars(ink: Ink, labels: Sequence[str], values: Sequence[int], vmax: float, x0: float, y0: float,
               height: float, step: float = 110, bar_w: float = 60, fontsize: float = 10) -> None:
    """Vertical bars on the baseline y0 + height, each with its value above and its label below."""
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        bar_h = height * value / vmax
        rect = pymupdf.Rect(x0 + i * step, y0 + height - bar_h, x0 + i * step + bar_w, y0 + height)
        ink.box(rect, color=(0.1, 0.3, 0.6), fill=(0.2, 0.4, 0.8))
        ink.text((rect.x0, rect.y0 - 5), str(value), fontsize)
        ink.text((rect.x0, y0 + height + 15), label, fontsize)


def draw_line_chart(ink: Ink, labels: Sequence[str], values: Sequence[str], vmax: float, x0: float, y0: float,
                     width: float, height: float, fontsize: float = 10) -> None:
    """Axes, a polyline through the points, each point's value above it and its label below the axis."""
    ink.line((x0, y0), (x0, y0 + height))
    ink.line((x0, y0 + height), (x0 + width, y0 + height))
    step = width / len(values)
    points = [(x0 + step * (i + 0.5), y0 + height - height * float(v) / vmax) for i, v in enumerate(values)]
    for p, q in zip(points, points[1:], strict=False):
        ink.line(p, q, color=(0.8, 0.2, 0.1), width=1.5)
    for (x, y), label, value in zip(points, labels, values, strict=True):
        ink.dot((x, y), 2.5, color=(0.8, 0.2, 0.1), fill=(0.8, 0.2, 0.1))
        ink.text((x - 10, y - 7), value, fontsize)
        ink.text((x - 12, y0 + height + 14), label, fontsize)

def largest_fontsize(rect: pymupdf.Rect, chars: int) -> float:
    """About the largest type size at which `chars` characters of prose fit in `rect` (a line takes
    1.2 em, a character 0.5 em or less)."""
    return (rect.width * rect.height / (0.5 * _LINE * chars)) ** 0.5


def flow_sentences(ink: Ink, rect: pymupdf.Rect, sentences: list[str], fontsize: float, keep: int = 1) -> None:
    """Flow as many leading `sentences` as fit into `rect`, at least the first `keep`."""
    def fits(n: int) -> bool:
        return len(_wrap(" ".join(sentences[:n]), rect.width, fontsize)) * _LINE * fontsize <= rect.height

    if not fits(keep):
        raise ValueError(f"{keep} sentence(s) do not fit in {tuple(rect)} at {fontsize:.1f} pt")
    low, high = keep, len(sentences)  # fits(low); the most that fit lies in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    ink.flow(rect, " ".join(sentences[:low]), fontsize)


def save_pdf(doc: pymupdf.Document, path: Path) -> None:
    """Write and close `doc`; the same seed gives the same bytes (no random file /ID), so a training
    corpus written again is recognised by the store as unchanged and not ingested again."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc.save(path, no_new_id=True)
    doc.close()

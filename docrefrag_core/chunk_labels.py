"""Which chunks of a question's pages hold its answer: the labels of the selector's supervised warm
start and of its recall metric (docs/decisions/selector.md).

A chunk is labelled relevant when its region holds one of the answer's terms, or holds one of the
question's key terms and touches (`near` chunks across or down, on the same page) a chunk that holds an
answer term: the row label beside a table value, the caption over a chart's bar. Terms are lower-cased
words of three letters or more outside a short stop list, and numbers, which match across their forms
(1,234 = 1234 = 1234.0; 12% = 12). This is a small matcher of its own: the answer layer's number forms
live above this layer. The labels need only the words of each chunk's region (`chunking.region_words`),
so they come the same way from generated documents, DocLongRAG-style sequences and real pages.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from docrefrag.core.chunking import region_words
from docrefrag.core.page import Word

_TERM = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?|[^\W\d_]+")
_STOP = frozenset("""the and for are was were with what which who whom whose how many much does did has have had
from that this these those than then there their its into onto over under per each all any some not does show shows
give gives list lists according value values what when where why year""".split())


class PageWords(Protocol):
    """A page's size and words (a store's `PageRecord`, a `PageInput`)."""

    width: float
    height: float
    words: list[Word]


def terms(text: str) -> set[str]:
    """The matchable terms of `text`: numbers in one canonical form, content words lower-cased."""
    out = set()
    for t in _TERM.findall(text):
        if t[0].isdigit():
            out.add(repr(float(t.replace(",", ""))))
        elif len(t) > 2 and t.lower() not in _STOP:
            out.add(t.lower())
    return out


def label_chunks(regions: list[list[list[str]]], question: str, answer: str, grid: int, k: int,
                 near: int = 1) -> list[tuple[int, int]]:
    """(page index, chunk) of the relevant chunks (see the module docstring), in page order.
    `regions`: per page, per chunk of its `grid x grid` layout in chunks of k cells, the region's words."""
    wanted, keys = terms(answer), terms(question)

    def touches(a: int, b: int) -> bool:
        (ra, ca), (rb, cb) = divmod(a * k, grid), divmod(b * k, grid)  # (row, first cell) of each chunk
        return abs(ra - rb) <= near and abs(ca - cb) <= near * k

    labels = []
    for i, page in enumerate(regions):
        held = [terms(" ".join(words)) for words in page]
        hits = {j for j, t in enumerate(held) if t & wanted}
        labels += [(i, j) for j, t in enumerate(held)
                   if j in hits or (t & keys and any(touches(j, h) for h in hits))]
    return labels


def page_labels(pages: Sequence[PageWords], question: str, answer: str, grid: int, k: int) -> list[tuple[int, int]]:
    """`label_chunks` over the regions of `pages` in a `grid x grid` layout in chunks of k cells."""
    regions = [region_words(p.words, p.width, p.height, grid, k) for p in pages]
    return label_chunks(regions, question, answer, grid, k)

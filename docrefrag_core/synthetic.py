"""What a synthetic document states: its facts, the regions of its pages, and the kinds of page.

The generators (`synthetic_report.sample_report`, `synthetic_training.training_document` and
`dense_text_page`) draw deterministic PDFs with PyMuPDF (`synthetic_draw`) and return these records:
the text and box of every region of every page (targets for text parsing, the text of a page, and text
localisation, the text inside a box) and question-answer pairs in MMLongBench-Doc's answer formats
whose evidence page and region are known.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

NO_EVIDENCE_BOX = (0.0, 0.0, 0.0, 0.0)  # bbox of an unanswerable question's Fact (its page is 0)
PAGE_KINDS = ("passage", "two_column", "table", "bar_chart", "line_chart", "slide")


@dataclass(frozen=True)
class Fact:
    """A fact printed on one page: where it is and what a question about it should return.

    An unanswerable question (answer "Not answerable", format "None") has page 0, kind "none" and
    bbox NO_EVIDENCE_BOX.
    """

    page: int  # 1-based
    kind: str  # "text", "table" or "chart" ("none": unanswerable)
    question: str
    answer: str
    answer_format: str  # MMLongBench-Doc format: Int, Float, Str, List, None
    bbox: tuple[float, float, float, float]


class Region(NamedTuple):
    """One region of a page: its box and the text drawn in it, in drawing (reading) order."""

    bbox: tuple[float, float, float, float]  # PDF points, origin top-left
    text: str
    role: str  # header, heading, paragraph, table, caption, chart, title or bullets


@dataclass(frozen=True)
class PageTruth:
    page: int  # 1-based
    kind: str  # one of PAGE_KINDS
    regions: list[Region]

    @property
    def text(self) -> str:
        """All the text of the page, region by region (the text-parsing target)."""
        return "\n".join(r.text for r in self.regions)


@dataclass(frozen=True)
class SyntheticDoc:
    path: Path
    title: str
    pages: list[PageTruth]
    questions: list[Fact]

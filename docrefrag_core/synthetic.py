"""Deterministic synthetic documents drawn with PyMuPDF, whose text and facts are known.

- `sample_report`: a multi-page report (headings, passages, tables, bar charts) stating one or two
  facts a page, for the demo and the tests.
- `training_document`: varied A4 pages for Doc-REFRAG training: passages of 500-6,000 characters in
  10-20 pt type, ruled tables, bar and line charts with titles and labelled values, two-column
  pages and slide-like pages. It returns the text and box of every region of every page (targets
  for text parsing, the text of a page, and text localisation, the text inside a box) and
  question-answer pairs in MMLongBench-Doc's answer formats whose evidence page and region are known.
- `dense_text_page`: one page holding about a given number of characters of running text, for a
  reconstruction test.

All text comes from the word pools and templates below; everything is a function of the seed.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from docrefrag.core.pdf import pymupdf

A4 = (595.0, 842.0)
NO_EVIDENCE_BOX = (0.0, 0.0, 0.0, 0.0)  # bbox of an unanswerable question's Fact (its page is 0)
PAGE_KINDS = ("passage", "two_column", "table", "bar_chart", "line_chart", "slide")
_REGIONS = ["North", "South", "East", "West", "Central", "Coastal", "Highland", "Lakeside"]
_TOPICS = [
    ("Energy", "solar capacity", "megawatts"), ("Transport", "rail passengers", "million trips"),
    ("Water", "treated water", "megalitres"), ("Housing", "new homes", "units"),
    ("Health", "clinic visits", "thousand visits"), ("Education", "graduates", "students"),
]
_FILLER = (
    "The committee reviewed the programme against its targets and noted where delivery fell short. "
    "Figures are reported for the financial year and audited by the independent office. "
    "Regional teams supplied the underlying records, which were reconciled with national statistics. "
    "Where estimates were needed, the method is described in the appendix to this report. "
)


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


class _Ink:
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


def _draw_table(ink: _Ink, rows: list[list[str]], x0: float, top: float, widths: Sequence[float],
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


def _draw_bars(ink: _Ink, labels: Sequence[str], values: Sequence[int], vmax: float, x0: float, y0: float,
               height: float, step: float = 110, bar_w: float = 60, fontsize: float = 10) -> None:
    """Vertical bars on the baseline y0 + height, each with its value above and its label below."""
    for i, (label, value) in enumerate(zip(labels, values)):
        bar_h = height * value / vmax
        rect = pymupdf.Rect(x0 + i * step, y0 + height - bar_h, x0 + i * step + bar_w, y0 + height)
        ink.box(rect, color=(0.1, 0.3, 0.6), fill=(0.2, 0.4, 0.8))
        ink.text((rect.x0, rect.y0 - 5), str(value), fontsize)
        ink.text((rect.x0, y0 + height + 15), label, fontsize)


def _draw_line_chart(ink: _Ink, labels: Sequence[str], values: Sequence[str], vmax: float, x0: float, y0: float,
                     width: float, height: float, fontsize: float = 10) -> None:
    """Axes, a polyline through the points, each point's value above it and its label below the axis."""
    ink.line((x0, y0), (x0, y0 + height))
    ink.line((x0, y0 + height), (x0 + width, y0 + height))
    step = width / len(values)
    points = [(x0 + step * (i + 0.5), y0 + height - height * float(v) / vmax) for i, v in enumerate(values)]
    for p, q in zip(points, points[1:]):
        ink.line(p, q, color=(0.8, 0.2, 0.1), width=1.5)
    for (x, y), label, value in zip(points, labels, values):
        ink.dot((x, y), 2.5, color=(0.8, 0.2, 0.1), fill=(0.8, 0.2, 0.1))
        ink.text((x - 10, y - 7), value, fontsize)
        ink.text((x - 12, y0 + height + 14), label, fontsize)


def sample_report(path: Path, pages: int = 12, seed: int = 0, title: str = "Annual Infrastructure Report") -> list[Fact]:
    """Write a `pages`-page A4 report to `path`; return the facts it states (one or two per page)."""
    if pages < 1:
        raise ValueError(f"pages must be >= 1, got {pages}")
    rng = random.Random(seed)
    doc = pymupdf.open()
    facts: list[Fact] = []
    for number in range(1, pages + 1):
        page = doc.new_page(width=A4[0], height=A4[1])
        ink = _Ink(page)
        page.insert_text((50, 40), f"{title}  |  page {number}", fontsize=9, color=(0.4, 0.4, 0.4))
        topic, measure, unit = _TOPICS[(number - 1) % len(_TOPICS)]
        year = 2015 + (number % 9)
        heading = f"{number}. {topic} programme review {year}"
        page.insert_text((50, 80), heading, fontsize=16)
        kind = ("text", "table", "chart")[(number - 1) % 3]
        if kind == "text":
            value = rng.randint(120, 980)
            region = rng.choice(_REGIONS)
            sentence = (f"In {year} the {region} region reported {value} {unit} of {measure}, "
                        f"the highest figure recorded for {topic.lower()} in that region. ")
            body = _FILLER + sentence + _FILLER
            rect = pymupdf.Rect(50, 100, 545, 420)
            page.insert_textbox(rect, body, fontsize=11)
            facts.append(Fact(number, "text", f"How many {unit} of {measure} did the {region} region report in {year}?",
                              str(value), "Int", tuple(rect)))
        elif kind == "table":
            regions = rng.sample(_REGIONS, 4)
            values = [round(rng.uniform(10, 99), 1) for _ in regions]
            rows = [["Region", f"{measure} ({unit})", "Change (%)"]] + [
                [r, f"{v}", f"{rng.randint(-9, 15)}"] for r, v in zip(regions, values)
            ]
            top = 110
            bottom = _draw_table(ink, rows, 55, top, [160] * 3)
            page.insert_text((50, bottom + 20), f"Table {number}: {measure} by region, {year}.", fontsize=10)
            best = regions[values.index(max(values))]
            facts.append(Fact(number, "table", f"Which region had the highest {measure} in Table {number}?", best, "Str",
                              (55.0, float(top), 535.0, float(bottom))))
        else:
            labels = rng.sample(_REGIONS, 4)
            values = [rng.randint(5, 60) for _ in labels]
            x0, y0, height = 80, 130, 220
            _draw_bars(ink, labels, values, 60, x0, y0, height)
            page.insert_text((50, y0 + height + 40), f"Figure {number}: {measure} ({unit}) by region in {year}.", fontsize=10)
            facts.append(Fact(number, "chart", f"What value does Figure {number} show for the {labels[0]} region?",
                              str(values[0]), "Int", (float(x0), float(y0), float(x0 + 430), float(y0 + height))))
        page.insert_textbox(pymupdf.Rect(50, 470, 545, 800), _FILLER * 2, fontsize=10)
    _save(doc, path)
    return facts


# --- training documents -----------------------------------------------------------------------

_DOMAINS = {  # domain -> (things a page is about, (measure, unit) pairs read as "<value> <unit> of <measure>")
    "Energy": (["turbine hall", "substation", "battery store", "feeder line", "solar array", "transformer yard"],
               [("solar output", "megawatts"), ("stored energy", "megawatt hours"), ("grid outages", "hours")]),
    "Transport": (["tram depot", "bus fleet", "river bridge", "interchange", "signal box", "cycle network"],
                  [("passenger travel", "thousand trips"), ("renewed track", "kilometres")]),
    "Health": (["community clinic", "maternity ward", "screening unit", "ambulance base", "pharmacy", "dental service"],
               [("outpatient care", "clinic visits"), ("new capacity", "beds"), ("vaccination", "doses")]),
    "Ecology": (["wetland reserve", "seed bank", "nesting site", "river survey", "forest plot", "meadow trial"],
                [("woodland planting", "trees"), ("bird monitoring", "sightings")]),
    "Finance": (["reserve fund", "grant scheme", "audit office", "payroll system", "procurement round", "tax office"],
                [("grant spending", "thousand euros"), ("supplier billing", "invoices")]),
    "Research": (["telescope dome", "detector array", "sample archive", "cold store", "field station", "data centre"],
                 [("sky survey data", "images"), ("telescope time", "hours"), ("soil sampling", "samples")]),
    "Farming": (["orchard", "grain store", "irrigation canal", "dairy herd", "greenhouse block", "tree nursery"],
                [("wheat", "tonnes"), ("milk", "thousand litres")]),
}
_WORDS = {
    "adj": ["regional", "seasonal", "revised", "detailed", "preliminary", "annual", "independent", "shared",
            "temporary", "municipal", "quarterly", "external", "joint", "interim", "technical", "public"],
    "verb": ["reviewed", "expanded", "inspected", "delayed", "funded", "upgraded", "monitored", "compared",
             "replaced", "documented", "audited", "scheduled", "extended", "relocated", "tested", "approved"],
    "team": ["works team", "planning office", "field crew", "steering group", "audit panel", "volunteer group",
             "county board", "safety committee", "design studio", "finance desk"],
    "event": ["the spring floods", "a supplier dispute", "the winter storms", "a budget revision",
              "the public consultation", "a change of contractor", "the summer heatwave", "an equipment recall"],
    "state": ["on schedule", "under review", "within budget", "closed for repairs", "fully staffed",
              "behind schedule", "over budget", "ready for handover"],
    "district": ["the old town", "the harbour district", "the northern suburbs", "the river valley",
                 "the market quarter", "the eastern estates", "the university campus", "the industrial park"],
    "month": ["January", "February", "March", "April", "May", "June", "July", "August", "September",
              "October", "November", "December"],
    "topic": ["review", "update", "summary", "outlook", "progress report", "briefing", "assessment"],
}
_TEMPLATES = [
    "The {adj} {noun} was {verb} by the {team} after {event}.",
    "Staff in {district} {verb} the {noun} and reported that the {noun2} remained {state}.",
    "Because the {noun} was {verb} in {month}, the {adj} work on the {noun2} moved to {month2}.",
    "A {adj} review of the {noun} found {count} issues, most of them minor.",
    "Officials in {district} expect the {noun} to be {verb} before {month} {year}.",
    "The {team} {verb} {count} records from the {noun} and shared them with the {team2}.",
    "According to the {team}, the {noun} in {district} is {state} and the {adj} budget is {state2}.",
    "Residents asked whether the {noun} would be {verb} again, and the {team} agreed to publish a {adj} note.",
    "Most of the {count} requests about the {noun} were answered within {small} days.",
    "The {adj} plan for the {noun} lists {small} priorities for {year}.",
    "During {month} the {team} met {small} times to discuss the {adj} {noun2}.",
    "Costs for the {noun} rose after {event}, so the {team} {verb} the {adj} estimate.",
]
_PREFIXES = ["Ash", "Bel", "Cor", "Dun", "Elm", "Fair", "Glen", "Hart", "Ivy", "Kes", "Lark", "Mill", "Nor",
             "Oak", "Pen", "Red", "Stan", "Thorn", "Wex", "York", "Bram", "Cale", "Dor", "Fen", "Gold", "Hol"]
_SUFFIXES = ["ford", "haven", "mere", "ton", "bridge", "field", "wick", "moor", "stead", "combe", "by", "dale",
             "hurst", "worth", "ley", "gate"]
_FIRST = ["Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Keiko", "Luca",
          "Maya", "Nils", "Olga", "Pablo", "Rosa", "Sami", "Tara", "Viktor"]
_LAST = ["Moreno", "Lindqvist", "Okafor", "Brennan", "Castillo", "Novak", "Haddad", "Ferreira", "Kowalski",
         "Nakamura", "Dubois", "Ricci", "Svensson", "Osei", "Petrov", "Almeida", "Fischer", "Quinn", "Rahman", "Weber"]
_LABEL_POOL = 64  # place names kept for table rows and chart labels (reused across pages)
_TOP, _BOTTOM, _LEFT, _RIGHT = 100.0, 805.0, 50.0, 545.0  # the body of a page


def _largest_fontsize(rect: pymupdf.Rect, chars: int) -> float:
    """About the largest type size at which `chars` characters of prose fit in `rect` (a line takes
    1.2 em, a character 0.5 em or less)."""
    return (rect.width * rect.height / (0.5 * _LINE * chars)) ** 0.5


def _fit(ink: _Ink, rect: pymupdf.Rect, sentences: list[str], fontsize: float, keep: int = 1) -> None:
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


class _Writer:
    """Draws the pages of one training document from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        names = [p + s for p in _PREFIXES for s in _SUFFIXES]
        self.rng.shuffle(names)
        self.labels, self.unique = names[:_LABEL_POOL], names[_LABEL_POOL:]  # unique: printed once at most
        self.domain = self.rng.choice(sorted(_DOMAINS))
        self.title = f"{self.place()} {self.domain} Review {self.rng.randint(2012, 2024)}"
        self.tables = self.figures = 0

    # words
    def place(self) -> str:
        if not self.unique:
            raise ValueError("the document ran out of distinct place names (they last about 150 pages); "
                             "ask for fewer pages")
        return self.unique.pop()

    def person(self) -> str:
        return f"{self.rng.choice(_FIRST)} {self.rng.choice(_LAST)}"

    def year(self) -> int:
        return self.rng.randint(2010, 2024)

    def sentence(self, nouns: list[str]) -> str:
        pick = self.rng.choice
        noun, noun2 = self.rng.sample(nouns, 2)
        team, team2 = self.rng.sample(_WORDS["team"], 2)
        month, month2 = self.rng.sample(_WORDS["month"], 2)
        state, state2 = self.rng.sample(_WORDS["state"], 2)
        return pick(_TEMPLATES).format(
            adj=pick(_WORDS["adj"]), noun=noun, noun2=noun2, verb=pick(_WORDS["verb"]), team=team, team2=team2,
            event=pick(_WORDS["event"]), state=state, state2=state2, district=pick(_WORDS["district"]),
            month=month, month2=month2, year=self.year(), count=self.rng.randint(3, 480), small=self.rng.randint(2, 9))

    def prose(self, chars: int, nouns: list[str]) -> list[str]:
        """Sentences adding up to at least `chars` characters."""
        out: list[str] = []
        while sum(len(s) + 1 for s in out) < chars:
            out.append(self.sentence(nouns))
        return out

    def claim(self, fmt: str, noun: str) -> tuple[str, str, str]:
        """(sentence stating a fact, question about it, answer) in MMLongBench-Doc format `fmt`."""
        measure, unit = self.rng.choice(_DOMAINS[self.domain][1])
        place, year = self.place(), self.year()
        if fmt == "Int":
            value = self.rng.randint(120, 9800)
            return (f"In {year} the {noun} at {place} recorded {value} {unit} of {measure}.",
                    f"How many {unit} of {measure} did the {noun} at {place} record in {year}?", str(value))
        if fmt == "Float":
            value = f"{self.rng.uniform(1, 99):.1f}"
            return (f"Over {year} the {noun} at {place} averaged {value} {unit} of {measure} a month.",
                    f"What monthly average of {measure}, in {unit}, did the {noun} at {place} report for {year}?",
                    value)
        if fmt == "Str":
            person = self.person()
            return (f"Throughout {year} the {noun} at {place} was led by {person}.",
                    f"Who led the {noun} at {place} in {year}?", person)
        assert fmt == "List", fmt
        sites = [self.place() for _ in range(3)]
        return (f"Three sites joined the {noun} programme of {place} in {year}: {sites[0]}, {sites[1]} and {sites[2]}.",
                f"Which sites joined the {noun} programme of {place} in {year}?", repr(sites))

    # page parts
    def header(self, page: pymupdf.Page, number: int) -> Region:
        ink = _Ink(page)
        ink.text((_LEFT, 40), f"{self.title}  |  page {number}", 9, color=(0.4, 0.4, 0.4))
        return ink.region("header")

    def heading(self, page: pymupdf.Page, number: int, noun: str) -> Region:
        ink = _Ink(page)
        topic = self.rng.choice(_WORDS["topic"])
        ink.text((_LEFT, 80), f"{number}. {self.domain}: {noun} {topic}", self.rng.uniform(16, 20))
        return ink.region("heading")

    def paragraph(self, page: pymupdf.Page, rect: pymupdf.Rect, chars: int, fontsize: float, nouns: list[str],
                  planted: Sequence[str] = ()) -> Region:
        """Prose of at most about `chars` characters (less if `rect` is full) with the `planted`
        sentences among its first few."""
        budget = chars - sum(len(s) + 1 for s in planted)
        sentences = self.prose(budget, nouns)
        while len(sentences) > 1 and sum(len(s) + 1 for s in sentences) > budget:
            sentences.pop()
        at = sorted(self.rng.sample(range(len(planted) + 3), len(planted)))
        for i, s in zip(at, planted):
            sentences.insert(i, s)
        ink = _Ink(page)
        _fit(ink, rect, sentences, fontsize, keep=at[-1] + 1 if planted else 1)
        return ink.region("paragraph")

    def page(self, page: pymupdf.Page, number: int, kind: str) -> tuple[list[Region], list[Fact]]:
        nouns = _DOMAINS[self.domain][0]
        noun = self.rng.choice(nouns)
        if kind == "slide":
            return self.slide(page, number, noun)
        regions = [self.header(page, number), self.heading(page, number, noun)]
        draw = {"passage": self.passage, "two_column": self.two_column, "table": self.table,
                "bar_chart": self.bar_chart, "line_chart": self.line_chart}[kind]
        more, facts = draw(page, number, noun, nouns)
        return regions + more, facts

    # page kinds: each returns its regions below the heading and the facts they state
    def passage(self, page, number, noun, nouns):
        rect = pymupdf.Rect(_LEFT, _TOP, _RIGHT, _BOTTOM)
        chars = self.rng.randint(500, 6000)
        fontsize = self.rng.uniform(10, max(10.0, min(20.0, _largest_fontsize(rect, chars))))
        formats = self.rng.sample(["Int", "Float", "Str", "List"], 2)
        claims = [self.claim(f, noun) for f in formats]
        region = self.paragraph(page, rect, chars, fontsize, nouns, [c[0] for c in claims])
        return [region], [Fact(number, "text", q, a, f, region.bbox) for f, (_, q, a) in zip(formats, claims)]

    def two_column(self, page, number, noun, nouns):
        fontsize = self.rng.uniform(10, 12)
        formats = ["Str", "Int"]
        claims = [self.claim(f, noun) for f in formats]
        sides = self.rng.sample([0, 1], 2)  # the column of each claim
        columns = []
        for side, x0, x1 in ((0, _LEFT, 290.0), (1, 305.0, _RIGHT)):
            planted = [c[0] for c, s in zip(claims, sides) if s == side]
            columns.append(self.paragraph(page, pymupdf.Rect(x0, _TOP, x1, _BOTTOM), self.rng.randint(700, 2400),
                                          fontsize, nouns, planted))
        facts = [Fact(number, "text", q, a, f, columns[s].bbox) for f, (_, q, a), s in zip(formats, claims, sides)]
        return columns, facts

    def table(self, page, number, noun, nouns):
        self.tables += 1
        t = self.tables
        measure, unit = self.rng.choice(_DOMAINS[self.domain][1])
        year = self.year()
        intro = self.paragraph(page, pymupdf.Rect(_LEFT, _TOP, _RIGHT, 240), 250, 11, nouns)
        n = self.rng.randint(4, 8)
        sites = self.rng.sample(self.labels, n)
        values = [f"{v / 10:.1f}" for v in self.rng.sample(range(100, 9990), n)]
        falling = set(self.rng.sample(range(n), self.rng.randint(1, n - 1)))
        changes = [self.rng.randint(-9, -1) if i in falling else self.rng.randint(0, 15) for i in range(n)]
        staff = [str(self.rng.randint(4, 90)) for _ in range(n)]
        rows = [["Site", f"{measure} ({unit})", "Change (%)", "Staff"]]
        rows += [[s, v, str(c), w] for s, v, c, w in zip(sites, values, changes, staff)]
        ink = _Ink(page)
        bottom = _draw_table(ink, rows, 55, intro.bbox[3] + 20, [110, 190, 90, 90], fontsize=10)
        table = ink.region("table")
        caption = _Ink(page)
        caption.text((_LEFT, bottom + 20), f"Table {t}: {measure} by site, {year}.", 10)
        caption = caption.region("caption")
        outro = self.paragraph(page, pymupdf.Rect(_LEFT, caption.bbox[3] + 12, _RIGHT, _BOTTOM),
                               self.rng.randint(300, 1500), 11, nouns)
        row = self.rng.randrange(n)
        facts = [
            Fact(number, "table", f"What {measure} in {unit} does Table {t} give for {sites[row]}?", values[row],
                 "Float", table.bbox),
            Fact(number, "table", f"Which sites in Table {t} had a negative change?",
                 repr([s for i, s in enumerate(sites) if i in falling]), "List", table.bbox),
        ]
        return [intro, table, caption, outro], facts

    def chart_title(self, measure: str, unit: str, by: str) -> str:
        self.figures += 1
        return f"Figure {self.figures}: {measure} ({unit}) by {by}"

    def bar_chart(self, page, number, noun, nouns):
        measure, unit = self.rng.choice(_DOMAINS[self.domain][1])
        title = self.chart_title(measure, unit, f"site, {self.year()}")
        n = self.rng.randint(4, 6)
        sites = self.rng.sample(self.labels, n)
        values = self.rng.sample(range(5, 96), n)
        ink = _Ink(page)
        ink.text((_LEFT, 120), title, 12)
        step = 440 / n
        _draw_bars(ink, sites, values, 100, 80, 150, 220, step=step, bar_w=0.55 * step, fontsize=9)
        chart = ink.region("chart")
        text = self.paragraph(page, pymupdf.Rect(_LEFT, chart.bbox[3] + 20, _RIGHT, _BOTTOM),
                              self.rng.randint(400, 1800), self.rng.uniform(10, 13), nouns)
        i = self.rng.randrange(n)
        low, high = sorted(self.rng.sample(sorted(values), 2))
        threshold = (low + high) // 2 if high - low > 1 else low  # strictly between two values when it can
        figure = title.split(":")[0]
        facts = [
            Fact(number, "chart", f"What value does {figure} show for {sites[i]}?", str(values[i]), "Int", chart.bbox),
            Fact(number, "chart", f"Which sites in {figure} have a value above {threshold}?",
                 repr([s for s, v in zip(sites, values) if v > threshold]), "List", chart.bbox),
        ]
        return [chart, text], facts

    def line_chart(self, page, number, noun, nouns):
        measure, unit = self.rng.choice(_DOMAINS[self.domain][1])
        title = self.chart_title(measure, unit, f"year at {self.place()}")
        n = self.rng.randint(5, 8)
        start = self.rng.randint(2005, 2016)
        years = [str(start + i) for i in range(n)]
        values = [f"{v / 10:.1f}" for v in self.rng.sample(range(50, 990), n)]
        ink = _Ink(page)
        ink.text((_LEFT, 120), title, 12)
        _draw_line_chart(ink, years, values, 110, 70, 160, 450, 220, fontsize=9)
        chart = ink.region("chart")
        text = self.paragraph(page, pymupdf.Rect(_LEFT, chart.bbox[3] + 20, _RIGHT, _BOTTOM),
                              self.rng.randint(400, 1800), self.rng.uniform(10, 13), nouns)
        i = self.rng.randrange(n)
        peak = years[max(range(n), key=lambda j: float(values[j]))]
        figure = title.split(":")[0]
        facts = [
            Fact(number, "chart", f"What value of {measure} does {figure} show for {years[i]}?", values[i], "Float",
                 chart.bbox),
            Fact(number, "chart", f"In which year does {figure} show the highest {measure}?", peak, "Int", chart.bbox),
        ]
        return [chart, text], facts

    def slide(self, page: pymupdf.Page, number: int, noun: str) -> tuple[list[Region], list[Fact]]:
        """A big centred title and a few short bullets (no header, no heading), like a presentation slide."""
        title = f"{self.rng.choice(_WORDS['adj']).capitalize()} {noun} {self.rng.choice(_WORDS['topic'])} {self.year()}"
        ink = _Ink(page)
        _fit(ink, pymupdf.Rect(_LEFT, 120, _RIGHT, 300), [title], self.rng.uniform(30, 36))
        head = ink.region("title")
        person, place = self.person(), self.place()
        bullets = [f"{self.rng.choice(_WORDS['verb']).capitalize()} the {self.rng.choice(_WORDS['adj'])} {n}"
                   for n in self.rng.sample(_DOMAINS[self.domain][0], self.rng.randint(2, 4))]
        bullets.insert(self.rng.randint(0, len(bullets)), f"{noun.capitalize()} at {place} led by {person}")
        ink = _Ink(page)
        lines = "\n".join(f"- {b}" for b in bullets)
        _fit(ink, pymupdf.Rect(70, 340, _RIGHT, _BOTTOM), [lines], self.rng.uniform(18, 22))
        body = ink.region("bullets")
        facts = [
            Fact(number, "text", f"How many bullet points does the slide titled '{title}' list?", str(len(bullets)),
                 "Int", body.bbox),
            Fact(number, "text", f"Who leads the {noun} at {place} according to the slides?", person, "Str", body.bbox),
        ]
        return [head, body], facts

    def unanswerable(self) -> Fact:
        """A question in the style of the document's facts about a place the document never names."""
        _, question, _ = self.claim(self.rng.choice(["Int", "Float", "Str"]), self.rng.choice(_DOMAINS[self.domain][0]))
        return Fact(0, "none", question, "Not answerable", "None", NO_EVIDENCE_BOX)


def training_document(path: Path, pages: int = 12, seed: int = 0) -> SyntheticDoc:
    """Write a `pages`-page A4 training document to `path`; return each page's regions and the questions.

    Page kinds are shuffled in blocks of six, so every kind appears in any document of 6 pages or more.
    Each page states two facts (formats: passage two of Int/Float/Str/List, two-column Str and Int,
    table Float and List, bar chart Int and List, line chart Float and Int, slide Int and Str) whose
    bbox is the region that states them; pages // 4 more questions (at least one) are unanswerable
    (page 0, see `Fact`): they ask about places the document never names. A List answer is a Python
    list literal, as in MMLongBench-Doc.
    """
    if pages < 1:
        raise ValueError(f"pages must be >= 1, got {pages}")
    writer = _Writer(seed)
    doc = pymupdf.open()
    truths: list[PageTruth] = []
    questions: list[Fact] = []
    kinds: list[str] = []
    for number in range(1, pages + 1):
        if not kinds:
            kinds = writer.rng.sample(PAGE_KINDS, len(PAGE_KINDS))
        kind = kinds.pop()
        regions, facts = writer.page(doc.new_page(width=A4[0], height=A4[1]), number, kind)
        truths.append(PageTruth(number, kind, regions))
        questions += facts
    for _ in range(max(1, pages // 4)):
        questions.insert(writer.rng.randint(0, len(questions)), writer.unanswerable())
    _save(doc, path)
    return SyntheticDoc(path, writer.title, truths, questions)


def dense_text_page(path: Path, chars: int, seed: int = 0, fontsize: float = 11.0) -> PageTruth:
    """Write one A4 page of about `chars` characters of running text (nothing else) to `path`; return its truth.

    The text is cut at a word boundary to at most `chars` characters and ends with a full stop.
    """
    if chars < 20:
        raise ValueError(f"chars must be >= 20, got {chars}")
    writer = _Writer(seed)
    words = " ".join(writer.prose(chars, _DOMAINS[writer.domain][0])).split()
    while len(" ".join(words)) >= chars:
        words.pop()
    text = " ".join(words).rstrip(".,:") + "."
    doc = pymupdf.open()
    ink = _Ink(doc.new_page(width=A4[0], height=A4[1]))
    if not ink.flow(pymupdf.Rect(_LEFT, 50, _RIGHT, _BOTTOM), text, fontsize):
        raise ValueError(f"{chars} characters do not fit on one page at {fontsize} pt; pass a smaller fontsize")
    _save(doc, path)
    return PageTruth(1, "passage", [ink.region("paragraph")])


def _save(doc: pymupdf.Document, path: Path) -> None:
    """Write and close `doc`; the same seed gives the same bytes (no random file /ID), so a training
    corpus written again is recognised by the store as unchanged and not ingested again."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc.save(path, no_new_id=True)
    doc.close()

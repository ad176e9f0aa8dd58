"""Deterministic synthetic training documents for Doc-REFRAG, with the truth of every page.

- `training_document`: varied A4 pages: passages of 500-6,000 characters in 10-20 pt type, ruled
  tables, bar and line charts with titles and labelled values, two-column pages and slide-like pages.
  It returns the text and box of every region of every page and question-answer pairs in
  MMLongBench-Doc's answer formats whose evidence page and region are known (`synthetic`).
- `dense_text_page`: one page holding about a given number of characters of running text, for a
  reconstruction test.

All text comes from the word pools and templates of `synthetic_words`; everything is a function of the seed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from docrefrag.core.pdf import pymupdf
from docrefrag.core.synthetic import NO_EVIDENCE_BOX, PAGE_KINDS, Fact, PageTruth, Region, SyntheticDoc
from docrefrag.core.synthetic_draw import (
    A4,
    Ink,
    draw_bars,
    draw_line_chart,
    draw_table,
    flow_sentences,
    largest_fontsize,
    save_pdf,
)
from docrefrag.core.synthetic_words import DOMAINS, FIRST, LAST, PREFIXES, SUFFIXES, TEMPLATES, WORDS

_LABEL_POOL = 64  # place names kept for table rows and chart labels (reused across pages)
_TOP, _BOTTOM, _LEFT, _RIGHT = 100.0, 805.0, 50.0, 545.0  # the body of a page


class _Writer:
    """Draws the pages of one training document from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        names = [p + s for p in PREFIXES for s in SUFFIXES]
        self.rng.shuffle(names)
        self.labels, self.unique = names[:_LABEL_POOL], names[_LABEL_POOL:]  # unique: printed once at most
        self.domain = self.rng.choice(sorted(DOMAINS))
        self.title = f"{self.place()} {self.domain} Review {self.rng.randint(2012, 2024)}"
        self.tables = self.figures = 0

    # words
    def place(self) -> str:
        if not self.unique:
            raise ValueError("the document ran out of distinct place names (they last about 150 pages); "
                             "ask for fewer pages")
        return self.unique.pop()

    def person(self) -> str:
        return f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}"

    def year(self) -> int:
        return self.rng.randint(2010, 2024)

    def sentence(self, nouns: list[str]) -> str:
        pick = self.rng.choice
        noun, noun2 = self.rng.sample(nouns, 2)
        team, team2 = self.rng.sample(WORDS["team"], 2)
        month, month2 = self.rng.sample(WORDS["month"], 2)
        state, state2 = self.rng.sample(WORDS["state"], 2)
        return pick(TEMPLATES).format(
            adj=pick(WORDS["adj"]), noun=noun, noun2=noun2, verb=pick(WORDS["verb"]), team=team, team2=team2,
            event=pick(WORDS["event"]), state=state, state2=state2, district=pick(WORDS["district"]),
            month=month, month2=month2, year=self.year(), count=self.rng.randint(3, 480), small=self.rng.randint(2, 9))

    def prose(self, chars: int, nouns: list[str]) -> list[str]:
        """Sentences adding up to at least `chars` characters."""
        out: list[str] = []
        while sum(len(s) + 1 for s in out) < chars:
            out.append(self.sentence(nouns))
        return out

    def claim(self, fmt: str, noun: str) -> tuple[str, str, str]:
        """(sentence stating a fact, question about it, answer) in MMLongBench-Doc format `fmt`."""
        measure, unit = self.rng.choice(DOMAINS[self.domain][1])
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
        ink = Ink(page)
        ink.text((_LEFT, 40), f"{self.title}  |  page {number}", 9, color=(0.4, 0.4, 0.4))
        return ink.region("header")

    def heading(self, page: pymupdf.Page, number: int, noun: str) -> Region:
        ink = Ink(page)
        topic = self.rng.choice(WORDS["topic"])
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
        for i, s in zip(at, planted, strict=False):
            sentences.insert(i, s)
        ink = Ink(page)
        flow_sentences(ink, rect, sentences, fontsize, keep=at[-1] + 1 if planted else 1)
        return ink.region("paragraph")

    def page(self, page: pymupdf.Page, number: int, kind: str) -> tuple[list[Region], list[Fact]]:
        nouns = DOMAINS[self.domain][0]
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
        fontsize = self.rng.uniform(10, max(10.0, min(20.0, largest_fontsize(rect, chars))))
        formats = self.rng.sample(["Int", "Float", "Str", "List"], 2)
        claims = [self.claim(f, noun) for f in formats]
        region = self.paragraph(page, rect, chars, fontsize, nouns, [c[0] for c in claims])
        return [region], [Fact(number, "text", q, a, f, region.bbox)
                          for f, (_, q, a) in zip(formats, claims, strict=True)]

    def two_column(self, page, number, noun, nouns):
        fontsize = self.rng.uniform(10, 12)
        formats = ["Str", "Int"]
        claims = [self.claim(f, noun) for f in formats]
        sides = self.rng.sample([0, 1], 2)  # the column of each claim
        columns = []
        for side, x0, x1 in ((0, _LEFT, 290.0), (1, 305.0, _RIGHT)):
            planted = [c[0] for c, s in zip(claims, sides, strict=True) if s == side]
            columns.append(self.paragraph(page, pymupdf.Rect(x0, _TOP, x1, _BOTTOM), self.rng.randint(700, 2400),
                                          fontsize, nouns, planted))
        facts = [Fact(number, "text", q, a, f, columns[s].bbox)
                 for f, (_, q, a), s in zip(formats, claims, sides, strict=True)]
        return columns, facts

    def table(self, page, number, noun, nouns):
        self.tables += 1
        t = self.tables
        measure, unit = self.rng.choice(DOMAINS[self.domain][1])
        year = self.year()
        intro = self.paragraph(page, pymupdf.Rect(_LEFT, _TOP, _RIGHT, 240), 250, 11, nouns)
        n = self.rng.randint(4, 8)
        sites = self.rng.sample(self.labels, n)
        values = [f"{v / 10:.1f}" for v in self.rng.sample(range(100, 9990), n)]
        falling = set(self.rng.sample(range(n), self.rng.randint(1, n - 1)))
        changes = [self.rng.randint(-9, -1) if i in falling else self.rng.randint(0, 15) for i in range(n)]
        staff = [str(self.rng.randint(4, 90)) for _ in range(n)]
        rows = [["Site", f"{measure} ({unit})", "Change (%)", "Staff"]]
        rows += [[s, v, str(c), w] for s, v, c, w in zip(sites, values, changes, staff, strict=True)]
        ink = Ink(page)
        bottom = draw_table(ink, rows, 55, intro.bbox[3] + 20, [110, 190, 90, 90], fontsize=10)
        table = ink.region("table")
        caption = Ink(page)
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
        measure, unit = self.rng.choice(DOMAINS[self.domain][1])
        title = self.chart_title(measure, unit, f"site, {self.year()}")
        n = self.rng.randint(4, 6)
        sites = self.rng.sample(self.labels, n)
        values = self.rng.sample(range(5, 96), n)
        ink = Ink(page)
        ink.text((_LEFT, 120), title, 12)
        step = 440 / n
        draw_bars(ink, sites, values, 100, 80, 150, 220, step=step, bar_w=0.55 * step, fontsize=9)
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
                 repr([s for s, v in zip(sites, values, strict=True) if v > threshold]), "List", chart.bbox),
        ]
        return [chart, text], facts

    def line_chart(self, page, number, noun, nouns):
        measure, unit = self.rng.choice(DOMAINS[self.domain][1])
        title = self.chart_title(measure, unit, f"year at {self.place()}")
        n = self.rng.randint(5, 8)
        start = self.rng.randint(2005, 2016)
        years = [str(start + i) for i in range(n)]
        values = [f"{v / 10:.1f}" for v in self.rng.sample(range(50, 990), n)]
        ink = Ink(page)
        ink.text((_LEFT, 120), title, 12)
        draw_line_chart(ink, years, values, 110, 70, 160, 450, 220, fontsize=9)
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
        title = f"{self.rng.choice(WORDS['adj']).capitalize()} {noun} {self.rng.choice(WORDS['topic'])} {self.year()}"
        ink = Ink(page)
        flow_sentences(ink, pymupdf.Rect(_LEFT, 120, _RIGHT, 300), [title], self.rng.uniform(30, 36))
        head = ink.region("title")
        person, place = self.person(), self.place()
        bullets = [f"{self.rng.choice(WORDS['verb']).capitalize()} the {self.rng.choice(WORDS['adj'])} {n}"
                   for n in self.rng.sample(DOMAINS[self.domain][0], self.rng.randint(2, 4))]
        bullets.insert(self.rng.randint(0, len(bullets)), f"{noun.capitalize()} at {place} led by {person}")
        ink = Ink(page)
        lines = "\n".join(f"- {b}" for b in bullets)
        flow_sentences(ink, pymupdf.Rect(70, 340, _RIGHT, _BOTTOM), [lines], self.rng.uniform(18, 22))
        body = ink.region("bullets")
        facts = [
            Fact(number, "text", f"How many bullet points does the slide titled '{title}' list?", str(len(bullets)),
                 "Int", body.bbox),
            Fact(number, "text", f"Who leads the {noun} at {place} according to the slides?", person, "Str", body.bbox),
        ]
        return [head, body], facts

    def unanswerable(self) -> Fact:
        """A question in the style of the document's facts about a place the document never names."""
        _, question, _ = self.claim(self.rng.choice(["Int", "Float", "Str"]), self.rng.choice(DOMAINS[self.domain][0]))
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
    save_pdf(doc, path)
    return SyntheticDoc(path, writer.title, truths, questions)


def dense_text_page(path: Path, chars: int, seed: int = 0, fontsize: float = 11.0) -> PageTruth:
    """Write one A4 page of about `chars` characters of running text (nothing else) to `path`; return its truth.

    The text is cut at a word boundary to at most `chars` characters and ends with a full stop.
    """
    if chars < 20:
        raise ValueError(f"chars must be >= 20, got {chars}")
    writer = _Writer(seed)
    words = " ".join(writer.prose(chars, DOMAINS[writer.domain][0])).split()
    while len(" ".join(words)) >= chars:
        words.pop()
    text = " ".join(words).rstrip(".,:") + "."
    doc = pymupdf.open()
    ink = Ink(doc.new_page(width=A4[0], height=A4[1]))
    if not ink.flow(pymupdf.Rect(_LEFT, 50, _RIGHT, _BOTTOM), text, fontsize):
        raise ValueError(f"{chars} characters do not fit on one page at {fontsize} pt; pass a smaller fontsize")
    save_pdf(doc, path)
    return PageTruth(1, "passage", [ink.region("paragraph")])

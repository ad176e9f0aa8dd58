"""`sample_report`: a deterministic multi-page report for the demo and the tests.

Headings, passages, tables and bar charts drawn with PyMuPDF, stating one or two facts a page (the
`Fact`s it returns); everything is a function of the seed.
"""

from __future__ import annotations

import random
from pathlib import Path

from docrefrag.core.pdf import pymupdf
from docrefrag.core.synthetic import Fact
from docrefrag.core.synthetic_draw import A4, Ink, draw_bars, draw_table, save_pdf

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


def sample_report(path: Path, pages: int = 12, seed: int = 0,
                  title: str = "Annual Infrastructure Report") -> list[Fact]:
    """Write a `pages`-page A4 report to `path`; return the facts it states (one or two per page)."""
    if pages < 1:
        raise ValueError(f"pages must be >= 1, got {pages}")
    rng = random.Random(seed)
    doc = pymupdf.open()
    facts: list[Fact] = []
    for number in range(1, pages + 1):
        page = doc.new_page(width=A4[0], height=A4[1])
        ink = Ink(page)
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
                [r, f"{v}", f"{rng.randint(-9, 15)}"] for r, v in zip(regions, values, strict=True)
            ]
            top = 110
            bottom = draw_table(ink, rows, 55, top, [160] * 3)
            page.insert_text((50, bottom + 20), f"Table {number}: {measure} by region, {year}.", fontsize=10)
            best = regions[values.index(max(values))]
            facts.append(Fact(number, "table", f"Which region had the highest {measure} in Table {number}?", best,
                              "Str", (55.0, float(top), 535.0, float(bottom))))
        else:
            labels = rng.sample(_REGIONS, 4)
            values = [rng.randint(5, 60) for _ in labels]
            x0, y0, height = 80, 130, 220
            draw_bars(ink, labels, values, 60, x0, y0, height)
            page.insert_text((50, y0 + height + 40), f"Figure {number}: {measure} ({unit}) by region in {year}.",
                             fontsize=10)
            facts.append(Fact(number, "chart", f"What value does Figure {number} show for the {labels[0]} region?",
                              str(values[0]), "Int", (float(x0), float(y0), float(x0 + 430), float(y0 + height))))
        page.insert_textbox(pymupdf.Rect(50, 470, 545, 800), _FILLER * 2, fontsize=10)
    save_pdf(doc, path)
    return facts

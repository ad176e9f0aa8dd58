"""A generated stated-facts set: long reports whose answers are stated in plain words, in MMLongBench-Doc's format.

Each report (30+ A4 pages, every word a function of the seed) states its facts in prose, in ruled tables
(a cell by row and column, and the lowest or highest of a column), in the right column of a two-column
page and in bulleted and numbered lists. Every entity also appears with other values elsewhere (the year
before in the same sentence, other years on other pages, a predecessor in the other column) as
distractors, and the filler pages are the training documents' sentence templates filled with each
report's own vocabulary. Each report also gets questions that it cannot answer (a year or a role it never
states). The questions are phrased as a user would ask them; nothing in them names the answer's form.

    python -m docrefrag.evals.stated_facts DIR [--reports 3] [--seed 0]
    docrefrag eval mmlongbench --data DIR --store STORE --out OUT

writes `DIR/documents/*.pdf` and `DIR/samples.json` (MMLongBench-Doc's fields), which the harness scores
with the official rules like the real dev set.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from docrefrag.core.pdf import pymupdf
from docrefrag.core.synthetic_draw import A4, Ink, draw_table, flow_sentences, save_pdf
from docrefrag.core.synthetic_words import DOMAINS, FIRST, LAST, PREFIXES, SUFFIXES, TEMPLATES, WORDS

_ORG_KINDS = ["Group", "Holdings", "Cooperative", "Authority", "Trust", "Partners"]
_DIVISION_KINDS = ["division", "business unit", "region"]
_ACTIVITIES = [  # (what is counted, verb in the past, verb as asked)
    ("shipments", "handled", "handle"), ("customer orders", "processed", "process"),
    ("inspections", "completed", "complete"), ("service calls", "answered", "answer"),
    ("new contracts", "signed", "sign"), ("training hours", "delivered", "deliver"),
]
_RATES = ["employee turnover", "on-time delivery rate", "customer retention rate", "recycling rate",
          "capacity utilisation"]
_METRICS = [("revenue", "EUR thousand"), ("operating costs", "EUR thousand"), ("headcount", "employees"),
            ("energy use", "MWh"), ("water use", "cubic metres")]
_ROLES = ["chief executive officer", "chief financial officer", "head of sustainability", "chair of the board",
          "chief operating officer"]
_UNSTATED_ROLES = ["chief data officer", "head of legal affairs", "company secretary"]
_MARKETS = ["Chile", "Vietnam", "Morocco", "Poland", "Kenya", "Peru", "Malaysia", "Portugal", "Ghana", "Colombia",
            "Romania", "Uruguay"]
_STEPS = ["register the supplier in the procurement system", "verify the supplier's tax certificate",
          "run the credit check", "agree the delivery schedule", "sign the framework contract",
          "schedule the first site audit", "issue the purchase order", "record the goods received note"]
_FACILITIES = ["distribution centre", "repair workshop", "training campus", "cold store", "recycling plant"]


def _place(rng: random.Random) -> str:
    return rng.choice(PREFIXES) + rng.choice(SUFFIXES)


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _filler(rng: random.Random, domain: str, n: int, extra: list[str]) -> list[str]:
    """`n` sentences of the domain's vocabulary, with `extra` (distractor sentences) mixed in."""
    nouns = DOMAINS[domain][0]
    out = []
    for _ in range(n):
        values = {k: rng.choice(v) for k, v in WORDS.items()}
        values.update(noun=rng.choice(nouns), noun2=rng.choice(nouns), month2=rng.choice(WORDS["month"]),
                      team2=rng.choice(WORDS["team"]), state2=rng.choice(WORDS["state"]),
                      count=rng.randint(12, 480), small=rng.randint(2, 9), year=rng.randint(2015, 2026))
        out.append(rng.choice(TEMPLATES).format(**values))
    for sentence in extra:
        out.insert(rng.randrange(len(out) + 1), sentence)
    return out


class _Report:
    """One report being written: its pages, its vocabulary and the questions about it."""

    def __init__(self, index: int, seed: int) -> None:
        self.rng = rng = random.Random(seed * 1000 + index)
        self.org = f"{_place(rng)} {rng.choice(_ORG_KINDS)}"
        self.year = rng.randint(2019, 2025)
        self.domain = rng.choice(sorted(DOMAINS))
        self.kind = rng.choice(_DIVISION_KINDS)
        self.divisions = rng.sample(sorted({_place(rng) for _ in range(30)}), 6)
        self.fontsize = rng.choice([9.5, 10.0, 10.5, 11.0])
        self.doc = pymupdf.open()
        self.name = f"stated-{index + 1:02d}-{self.org.lower().replace(' ', '-')}.pdf"
        self.samples: list[dict] = []

    def page(self, heading: str) -> tuple[pymupdf.Page, Ink]:
        page = self.doc.new_page(width=A4[0], height=A4[1])
        page.insert_text((50, 36), f"{self.org}  |  Annual Report {self.year}  |  page {self.doc.page_count}",
                         fontsize=8, color=(0.45, 0.45, 0.45))
        page.insert_text((50, 72), heading, fontsize=15)
        return page, Ink(page)

    def prose(self, heading: str, extra: list[str], sentences: int = 18) -> int:
        _, ink = self.page(heading)
        flow_sentences(ink, pymupdf.Rect(50, 92, 545, 790), _filler(self.rng, self.domain, sentences, extra),
                       self.fontsize, keep=sentences + len(extra))
        return self.doc.page_count

    def ask(self, question: str, answer: str, fmt: str, page: int | None, source: str) -> None:
        self.samples.append({"doc_id": self.name, "doc_type": "Financial report", "question": question,
                             "answer": answer, "evidence_pages": str([page] if page else []),
                             "evidence_sources": str([source] if page else []), "answer_format": fmt})


def _prose_facts(r: _Report) -> None:
    rng, y = r.rng, r.year
    counted, did, do = rng.choice(_ACTIVITIES)
    div, other = rng.sample(r.divisions, 2)
    value, before, older = (rng.randint(2_000, 60_000) for _ in range(3))
    page = r.prose(f"Operations in the {div} {r.kind}", [
        f"In {y} the {div} {r.kind} {did} {value:,} {counted}, compared with {before:,} in {y - 1}.",
        f"The {other} {r.kind} {did} {rng.randint(2_000, 60_000):,} {counted} in {y}."])
    r.prose("Operations review (continued)", [f"Back in {y - 2}, the {div} {r.kind} {did} {older:,} {counted}."])
    r.ask(f"How many {counted} did the {div} {r.kind} {do} in {y}?", str(value), "Int", page, "Pure-text (Plain-text)")
    r.ask(f"How many {counted} did the {div} {r.kind} {do} in {y - 6}?", "Not answerable", "None", None, "")

    rate, div2 = rng.choice(_RATES), rng.choice(r.divisions)
    now, then = round(rng.uniform(3, 97), 1), round(rng.uniform(3, 97), 1)
    page = r.prose(f"People and performance {y}", [
        f"The {rate} of the {div2} {r.kind} reached {now}% in {y}, against {then}% a year earlier."])
    r.ask(f"What was the {rate} of the {div2} {r.kind} in {y}?", str(now), "Float", page, "Pure-text (Plain-text)")

    facility, town = rng.choice(_FACILITIES), _place(rng)
    opened = rng.randint(2001, y - 1)
    page = r.prose("Sites and facilities", [
        f"The {facility} in {town} opened on {rng.randint(1, 28)} {rng.choice(WORDS['month'])} {opened} and now "
        f"serves {rng.randint(3, 40)} customers a day.",
        f"A second {facility} is planned for {_place(rng)} by {y + rng.randint(2, 5)}."])
    r.ask(f"In which year did the {facility} in {town} open?", str(opened), "Int", page, "Pure-text (Plain-text)")


def _table_facts(r: _Report) -> None:
    rng, y = r.rng, r.year
    (metric, unit), (metric2, unit2) = rng.sample(_METRICS, 2)
    rows = r.divisions[:5]
    years = [y - 2, y - 1, y]
    values = {(d, yr): rng.randint(1_200, 98_000) for d in rows for yr in years}
    number = rng.randint(3, 9)
    _, ink = r.page(f"{metric.capitalize()} by {r.kind}")
    bottom = draw_table(ink, [[r.kind.capitalize(), *map(str, years)]] +
                        [[d, *(f"{values[d, yr]:,}" for yr in years)] for d in rows], 60, 100, [150, 110, 110, 110])
    ink.text((55, bottom + 18), f"Table {number}: {metric} by {r.kind}, {years[0]}-{y} ({unit}).", 10)
    flow_sentences(ink, pymupdf.Rect(50, bottom + 40, 545, 790), _filler(rng, r.domain, 8, []), r.fontsize)
    page = r.doc.page_count
    div, yr = rng.choice(rows), rng.choice(years[:2])
    r.ask(f"According to Table {number}, what was the {metric} of the {div} {r.kind} in {yr}?",
          str(values[div, yr]), "Int", page, "Table")

    margins = {d: round(rng.uniform(2, 30), 1) for d in rows[:4]}
    _, ink = r.page(f"{metric2.capitalize()} and margins")
    flow_sentences(ink, pymupdf.Rect(50, 92, 545, 300), _filler(rng, r.domain, 6, []), r.fontsize)
    bottom = draw_table(ink, [[r.kind.capitalize(), f"{metric2} {y} ({unit2})", "Margin (%)"]] +
                        [[d, f"{rng.randint(500, 40_000):,}", f"{margins[d]}"] for d in rows[:4]],
                        60, 320, [150, 200, 110])
    ink.text((55, bottom + 18), f"Table {number + 1}: {metric2} and operating margin by {r.kind}, {y}.", 10)
    lowest = rng.random() < 0.5
    best = (min if lowest else max)(margins, key=margins.get)
    r.ask(f"Which {r.kind} had the {'lowest' if lowest else 'highest'} operating margin in {y} according to "
          f"Table {number + 1}?", best, "Str", r.doc.page_count, "Table")


def _two_column_fact(r: _Report) -> None:
    rng = r.rng
    role = rng.choice(_ROLES)
    name, former = _person(rng), _person(rng)
    _, ink = r.page("Governance")
    left = _filler(rng, r.domain, 10, [f"{former} served as {role} of {r.org} until {r.year - 3}."])
    right = _filler(rng, r.domain, 10, [f"The {role} of {r.org} is {name}, who took up the post in {r.year - 2}."])
    flow_sentences(ink, pymupdf.Rect(50, 92, 285, 790), left, r.fontsize, keep=len(left))
    flow_sentences(ink, pymupdf.Rect(310, 92, 545, 790), right, r.fontsize, keep=len(right))
    r.ask(f"Who is the {role} of {r.org}?", name, "Str", r.doc.page_count, "Generalized-text (Layout)")
    r.ask(f"Who is the {rng.choice(_UNSTATED_ROLES)} of {r.org}?", "Not answerable", "None", None, "")


def _list_facts(r: _Report) -> None:
    rng, y = r.rng, r.year
    markets = rng.sample(_MARKETS, rng.randint(2, 4))
    steps = rng.sample(_STEPS, 5)
    _, ink = r.page(f"Strategy for {y + 1}")
    flow_sentences(ink, pymupdf.Rect(50, 92, 545, 260), _filler(rng, r.domain, 5, []), r.fontsize)
    top = 280
    ink.text((50, top), f"Priority markets for {y + 1}:", 11)
    for i, market in enumerate(markets):
        ink.text((64, top + 18 * (i + 1)), f"- {market}", 11)
    top += 18 * (len(markets) + 2)
    ink.text((50, top), "Supplier onboarding procedure:", 11)
    for i, step in enumerate(steps):
        ink.text((64, top + 18 * (i + 1)), f"{i + 1}. {step.capitalize()}.", 11)
    flow_sentences(ink, pymupdf.Rect(50, top + 18 * 7, 545, 790), _filler(rng, r.domain, 8, []), r.fontsize)
    page = r.doc.page_count
    r.ask(f"Which countries are the priority markets for {y + 1}?", str(markets), "List", page,
          "Pure-text (Plain-text)")
    r.ask("What is the third step of the supplier onboarding procedure?", steps[2], "Str", page,
          "Generalized-text (Layout)")


def write_report(index: int, seed: int, out: Path, pages: int = 34) -> list[dict]:
    """Write one report to `out/documents/`; return its questions (MMLongBench-Doc records)."""
    r = _Report(index, seed)
    _, ink = r.page(f"{r.org}: Annual Report {r.year}")
    ink.text((50, 110), f"Our year in {r.domain.lower()}, across {len(r.divisions)} {r.kind}s", 12)
    writers = [_prose_facts, _table_facts, _two_column_fact, _list_facts]
    r.rng.shuffle(writers)
    for write in writers:
        for _ in range(r.rng.randint(2, 5)):  # filler between the fact pages, with same-entity distractors
            d = r.rng.choice(r.divisions)
            r.prose(f"{r.rng.choice(WORDS['topic']).capitalize()}: {r.rng.choice(DOMAINS[r.domain][0])}",
                    [f"The {d} {r.kind} opened {r.rng.randint(2, 9)} new offices in {r.year - r.rng.randint(1, 4)}."])
        write(r)
    while r.doc.page_count < pages:
        r.prose(f"Notes to the report ({r.doc.page_count - 1})", [])
    save_pdf(r.doc, out / "documents" / r.name)
    return r.samples


def write_set(out: Path, reports: int = 3, seed: int = 0) -> list[dict]:
    """Write `reports` reports and `out/samples.json`; return the questions."""
    samples = [s for i in range(reports) for s in write_report(i, seed, Path(out))]
    (Path(out) / "samples.json").write_text(json.dumps(samples, indent=1))
    return samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for documents/ and samples.json")
    parser.add_argument("--reports", type=int, default=3, help="reports to write (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every word and number (default 0)")
    args = parser.parse_args(argv)
    samples = write_set(args.out, args.reports, args.seed)
    answerable = sum(s["answer"] != "Not answerable" for s in samples)
    print(f"wrote {args.reports} reports and {len(samples)} questions ({answerable} answerable) to {args.out}")


if __name__ == "__main__":
    main()

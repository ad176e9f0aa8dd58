"""Synthetic training documents: determinism by seed, A4 pages of every kind, region texts that
PyMuPDF finds inside their boxes, questions whose evidence is on the stated page and region, all
five MMLongBench-Doc answer formats, and dense pages of a given length.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pymupdf
import pytest

from docrefrag.core.synthetic import NO_EVIDENCE_BOX, PAGE_KINDS
from docrefrag.core.synthetic_report import sample_report
from docrefrag.core.synthetic_training import dense_text_page, training_document

PAGES = 12


def norm(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    return training_document(tmp_path_factory.mktemp("train") / "train.pdf", pages=PAGES, seed=7)


def _content(path: Path) -> list[bytes]:
    with pymupdf.open(path) as pdf:
        return [page.read_contents() for page in pdf]


def test_same_seed_same_document_other_seed_another(doc, tmp_path):
    again = training_document(tmp_path / "again.pdf", pages=PAGES, seed=7)
    assert (again.title, again.pages, again.questions) == (doc.title, doc.pages, doc.questions)
    assert _content(again.path) == _content(doc.path)
    assert again.path.read_bytes() == doc.path.read_bytes()  # byte for byte: a rewritten corpus is not ingested again
    other = training_document(tmp_path / "other.pdf", pages=PAGES, seed=8)
    assert [p.text for p in other.pages] != [p.text for p in doc.pages]
    assert other.questions != doc.questions


def test_pages_are_a4_and_every_kind_appears(doc):
    with pymupdf.open(doc.path) as pdf:
        assert len(pdf) == PAGES
        assert all((page.rect.width, page.rect.height) == (595.0, 842.0) for page in pdf)
    assert [p.page for p in doc.pages] == list(range(1, PAGES + 1))
    assert Counter(p.kind for p in doc.pages) == {kind: PAGES // len(PAGE_KINDS) for kind in PAGE_KINDS}
    roles = {r.role for p in doc.pages for r in p.regions}
    assert roles == {"header", "heading", "paragraph", "table", "caption", "chart", "title", "bullets"}


def test_region_text_is_what_pymupdf_finds_in_its_box(doc):
    with pymupdf.open(doc.path) as pdf:
        for truth in doc.pages:
            page = pdf[truth.page - 1]
            assert norm(page.get_text("text")) == norm(truth.text), truth.page  # the text-parsing target
            for i, region in enumerate(truth.regions):
                box = pymupdf.Rect(region.bbox)
                assert box in page.rect and region.text.strip()
                assert norm(page.get_text("text", clip=box)) == norm(region.text), (truth.page, region.role)
                for other in truth.regions[i + 1:]:
                    assert (box & pymupdf.Rect(other.bbox)).is_empty, (truth.page, region.role, other.role)


def test_passages_vary_in_length_and_type_size(tmp_path):
    lengths, sizes = [], set()
    for seed in range(6):
        doc = training_document(tmp_path / f"{seed}.pdf", 12, seed)
        with pymupdf.open(doc.path) as pdf:
            for truth in doc.pages:
                if truth.kind == "passage":
                    (region,) = [r for r in truth.regions if r.role == "paragraph"]
                    lengths.append(len(region.text))
                    sizes |= {span["size"] for block in pdf[truth.page - 1].get_text("dict", clip=region.bbox)["blocks"]
                              for line in block["lines"] for span in line["spans"]}
    assert len(lengths) == 12 and 500 <= min(lengths) < 1500 and 4500 < max(lengths) <= 6000
    assert 10 <= min(sizes) and max(sizes) <= 20 and max(sizes) - min(sizes) > 2


def test_questions_have_their_evidence_on_the_stated_page_and_region(doc):
    text = norm("\n".join(p.text for p in doc.pages))
    for q in doc.questions:
        if q.answer_format == "None":
            assert (q.page, q.kind, q.answer, q.bbox) == (0, "none", "Not answerable", NO_EVIDENCE_BOX)
            (place,) = re.findall(r" at ([A-Z][a-z]+)", q.question)
            assert place not in text, q  # the document never names the place asked about
            continue
        truth = doc.pages[q.page - 1]
        (region,) = [r for r in truth.regions if r.bbox == q.bbox]
        assert q.kind == {"table": "table", "chart": "chart"}.get(region.role, "text")
        if q.question.startswith("How many bullet points"):
            assert int(q.answer) == region.text.count("- ") >= 3
            continue
        items = ast.literal_eval(q.answer) if q.answer_format == "List" else [q.answer]
        assert items and all(norm(item) in norm(region.text) for item in items), q
        if q.answer_format in ("Int", "Float"):
            assert re.fullmatch(r"\d+" if q.answer_format == "Int" else r"\d+\.\d", q.answer)
        # the question's distinctive words (place, table or figure number) are on its page and no other
        found = re.search(r"(Table \d+|Figure \d+)|(?: at | of )([A-Z][a-z]+)", q.question)
        key = found.group(1) or found.group(2)
        on = [p.page for p in doc.pages if re.search(rf"\b{key}\b", p.text)]
        assert on == [q.page], (q, on)


def test_all_answer_formats_appear(doc):
    formats = Counter(q.answer_format for q in doc.questions)
    assert set(formats) == {"Int", "Float", "Str", "List", "None"}
    assert formats["None"] == PAGES // 4
    assert len(doc.questions) == 2 * PAGES + PAGES // 4


@pytest.mark.parametrize("chars", [500, 1000, 2000, 4000])
def test_dense_text_page_has_about_chars_characters(tmp_path, chars):
    truth = dense_text_page(tmp_path / "dense.pdf", chars, seed=3)
    assert chars * 0.97 <= len(truth.text) <= chars
    with pymupdf.open(tmp_path / "dense.pdf") as pdf:
        assert len(pdf) == 1 and (pdf[0].rect.width, pdf[0].rect.height) == (595.0, 842.0)
        assert norm(pdf[0].get_text("text")) == norm(truth.text)
    assert dense_text_page(tmp_path / "again.pdf", chars, seed=3) == truth
    assert dense_text_page(tmp_path / "other.pdf", chars, seed=4).text != truth.text


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="pages must be >= 1"):
        training_document(tmp_path / "x.pdf", pages=0)
    with pytest.raises(ValueError, match="pass a smaller fontsize"):
        dense_text_page(tmp_path / "x.pdf", 4000, fontsize=20)


def test_sample_report_is_unchanged(tmp_path):
    """The shared drawing helpers draw the report as before (facts as the demo and tests know them)."""
    facts = sample_report(tmp_path / "report.pdf", pages=3, seed=0)
    assert [(f.page, f.kind, f.answer, f.answer_format) for f in facts] == [
        (1, "text", "514", "Int"), (2, "table", "East", "Str"), (3, "chart", "56", "Int")]
    with pymupdf.open(tmp_path / "report.pdf") as pdf:
        assert [len(page.get_drawings()) for page in pdf] == [0, 10, 4]
        assert "East" in pdf[1].get_text("text", clip=facts[1].bbox)

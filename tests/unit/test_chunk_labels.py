"""Chunk labels on pages generated with PyMuPDF: the chunks whose region holds the answer's words
(numbers in any of their forms) and the question's key terms beside them, nothing else."""

from __future__ import annotations

import pymupdf

from docrefrag.core.chunk_labels import label_chunks, terms
from docrefrag.core.chunking import region_words
from docrefrag.core.page import Word

GRID, K = 6, 3  # a 360 x 360 page: chunk j covers cells 3(j % 2) .. 3(j % 2) + 2 of row j // 2, 180 x 60 points


def page_words(lines: list[tuple[float, float, str]]) -> list[list[str]]:
    """The words per chunk of a generated page with `lines` of text at (x, y)."""
    doc = pymupdf.open()
    page = doc.new_page(width=360, height=360)
    for x, y, text in lines:
        page.insert_text((x, y), text, fontsize=9)
    words = [Word(w[4], *w[:4], w[5]) for w in page.get_text("words")]
    doc.close()
    return region_words(words, 360, 360, GRID, K)


def test_numbers_match_across_forms_and_stop_words_do_not_count():
    assert terms("1,234.5 tonnes") == terms("1234.50 Tonnes") == {"1234.5", "tonnes"}
    assert terms("12%") == terms("12") and terms("12") != terms("120")
    assert terms("How many of the sites?") == {"sites"}


def test_a_generated_page_labels_the_answer_and_the_key_term_beside_it():
    question, answer = "How many tonnes did Lakeford record?", "1,234.5"
    first = page_words([
        (20, 30, "Lakeford"),  # chunk 0: a key term beside the answer
        (200, 30, "recorded 1234.50"),  # chunk 1: the answer, written another way
        (200, 200, "tonnes 99 by Harwick"),  # chunk 7: a key term far from any answer
        (20, 330, "Lakeford again"),  # chunk 10: the same, far away
    ])
    second = page_words([(200, 150, "total 1234.5"), (20, 250, "nothing to see")])  # chunk 5; chunk 8
    assert label_chunks([first, second], question, answer, GRID, K) == [(0, 0), (0, 1), (1, 5)]


def test_a_page_without_the_answer_has_no_labels():
    words = page_words([(20, 30, "Lakeford recorded 1,234 tonnes"), (200, 200, "12345.0")])
    assert label_chunks([words], "How many tonnes did Lakeford record?", "1,234.5", GRID, K) == []

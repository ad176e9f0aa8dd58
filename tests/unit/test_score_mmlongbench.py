"""Parity tests for evals/score_mmlongbench.py against the official MMLongBench-Doc rules.

Every expected value is worked out by hand from the upstream code (mayubo2333/MMLongBench-Doc
eval/eval_score.py); the comment beside a case shows the arithmetic where it is not obvious.
"""

from __future__ import annotations

import pytest
from test_score_common import _accuracies, _counts

from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.evals.score_mmlongbench import MMLONGBENCH_FORMATS, mmlongbench_aggregate, mmlongbench_score

# (gt, pred, answer_format, expected)
MMLONGBENCH_CASES = [
    # --- Int: int(gt) == int(float(pred)), prediction not cleaned
    pytest.param("8", "8", "Int", 1.0, id="int-equal"),
    pytest.param("8", "8.9", "Int", 1.0, id="int-float-pred-truncated"),
    pytest.param("8", "7.99", "Int", 0.0, id="int-truncated-below"),
    pytest.param("-3", "-3.7", "Int", 1.0, id="int-truncates-toward-zero"),
    pytest.param("8", "eight", "Int", 0.0, id="int-words"),
    pytest.param("8", "", "Int", 0.0, id="int-empty-pred"),
    pytest.param("8", " 8 ", "Int", 1.0, id="int-whitespace"),
    pytest.param("8", "$8", "Int", 0.0, id="int-no-cleaning-dollar"),
    pytest.param("8", "8 (approx.)", "Int", 0.0, id="int-no-cleaning-parens"),
    pytest.param("1000", "1e3", "Int", 1.0, id="int-exponent"),
    pytest.param("1000", "1,000", "Int", 0.0, id="int-comma-not-removed"),
    pytest.param("8", "inf", "Int", 0.0, id="int-inf"),
    pytest.param("8", "nan", "Int", 0.0, id="int-nan"),
    # --- Float: gt, gt/100, gt*100; isclose rel 0.01, then rounding to max(min(d), 2) places
    pytest.param("18.29%", "18.29", "Float", 1.0, id="float-gt-percent-stripped"),
    pytest.param("12.5", "12.5%", "Float", 1.0, id="float-pred-percent-stripped"),
    pytest.param("0.5", "50", "Float", 1.0, id="float-gt-times-100"),
    pytest.param("50", "0.5", "Float", 1.0, id="float-gt-over-100"),
    pytest.param("21%", "0.21", "Float", 1.0, id="float-percent-as-fraction"),
    pytest.param("100", "100.9", "Float", 1.0, id="float-isclose-within-1pct"),  # 0.9 <= 1.009
    pytest.param("100", "101.5", "Float", 0.0, id="float-isclose-beyond-1pct"),  # 1.5 > 1.015
    # 0.054 vs 0.05: not close (0.004 > 0.00054); digits = max(min(3, 2), 2) = 2 -> 0.05 == 0.05
    pytest.param("0.05", "0.054", "Float", 1.0, id="float-rounding-match"),
    pytest.param("0.05", "0.056", "Float", 0.0, id="float-rounding-mismatch"),  # 0.06 != 0.05
    # 0.304 vs 0.3: not close (0.004 > 0.00304); digits = max(min(3, 1), 2) = 2 -> 0.3 == 0.3
    pytest.param("0.3", "0.304", "Float", 1.0, id="float-rounding-to-gt-decimals-floor-2"),
    # 0.34 vs 0.3: one decimal would match, but the floor is 2 places: 0.34 != 0.3
    pytest.param("0.3", "0.34", "Float", 0.0, id="float-rounding-floor-is-2-places"),
    # target gt/100 = 1e-05, str() has no ".", so 3 digits; pred 0.0 has 1 -> 2 places: 0.0 == 0.0
    pytest.param("0.001", "0", "Float", 1.0, id="float-zero-rounds-to-small-gt"),
    pytest.param("12.5", "$12.5", "Float", 1.0, id="float-dollar"),
    pytest.param("12.5", "12.5 (approx.)", "Float", 1.0, id="float-parens"),
    pytest.param("12.5", "'12.5'", "Float", 1.0, id="float-quotes"),
    pytest.param("12.5", "twelve", "Float", 0.0, id="float-words"),
    pytest.param("1234.5", "1,234.5", "Float", 0.0, id="float-comma-not-removed"),
    pytest.param("2.5", "2.5 million", "Float", 0.0, id="float-million-not-removed"),
    pytest.param("abc", "1", "Float", 0.0, id="float-unparsable-gt"),
    # --- Str / None: exact for exact-match types, else ANLS with threshold 0.5
    pytest.param("Less well-off", "less well-off", "Str", 1.0, id="str-lowercase"),
    pytest.param("Europe IPO", "Europe IPO index", "Str", 1 - 6 / 16, id="str-anls-partial"),
    pytest.param("abcd", "abef", "Str", 0.0, id="str-anls-exactly-half-is-zero"),  # 1 - 2/4
    pytest.param("abcde", "abcxy", "Str", 0.6, id="str-anls-above-half"),  # 1 - 2/5
    pytest.param("abcdef", "abxyzw", "Str", 0.0, id="str-anls-below-half"),  # 1 - 4/6
    pytest.param(
        "Berlin School of Experimental Psychology",
        "Berlin School of Experimental Psychology.",
        "Str",
        40 / 41,
        id="str-anls-near",
    ),
    pytest.param("ßa", "xa", "Str", 2 / 3, id="str-anls-length-of-upper"),  # len("SSA") = 3
    pytest.param("Chart (left)", "chart", "Str", 1.0, id="str-parens-dropped"),
    pytest.param("'Europe'", "europe", "Str", 1.0, id="str-quotes-dropped"),
    pytest.param("https://w.wiki/6gb", "https://w.wiki/6gb", "Str", 1.0, id="exact-url-equal"),
    pytest.param("https://w.wiki/6gb", "https://w.wiki/6gc", "Str", 0.0, id="exact-url"),
    pytest.param("train.py", "train.pyc", "Str", 0.0, id="exact-py"),
    pytest.param(
        "WikidataMapMakingWorkshop.ipynb", "WikidataMapMakingWorkshop", "Str", 0.0, id="exact-ipynb"
    ),
    pytest.param("Page 5", "page 6", "Str", 0.0, id="exact-page"),
    pytest.param("555-1234", "555-1235", "Str", 0.0, id="exact-phone"),
    pytest.param("2015-2016", "2015-2016", "Str", 1.0, id="exact-number-range-equal"),
    pytest.param("9259", "9258", "Str", 0.0, id="exact-number"),
    pytest.param("12 34", "12 35", "Str", 0.0, id="exact-number-space"),
    pytest.param("10 a.m.", "10 a.m", "Str", 0.0, id="exact-am"),
    pytest.param("3 p.m.", "3 P.M.", "Str", 1.0, id="exact-pm-equal-after-lowercase"),
    pytest.param("2023-01-15", "2023-01-16", "Str", 0.0, id="exact-date"),
    pytest.param("2023 01 15", "2023 01 16", "Str", 0.0, id="exact-date-spaces"),
    pytest.param("info@example.com", "info@example.org", "Str", 0.0, id="exact-email"),
    pytest.param("Not answerable", "Not answerable", "None", 1.0, id="none-equal"),
    pytest.param("Not answerable", "10", "None", 0.0, id="none-answered"),
    # --- List: equal lengths, both sides cleaned and sorted
    pytest.param("['White', '10%']", "['10%', 'White']", "List", 1.0, id="list-numeric-first"),
    pytest.param("['10%', 'White']", "[10, 'white']", "List", 1.0, id="list-items-cleaned"),
    pytest.param(
        "['Circle', 'Rectangle']", "['rectangle', 'circle']", "List", 1.0, id="list-str-sorted"
    ),
    pytest.param("['Circle', 'Rectangle']", "['Circle']", "List", 0.0, id="list-shorter"),
    pytest.param("['Circle']", "['Circle', 'Square']", "List", 0.0, id="list-longer"),
    # sorted: (apple, apples) 1 - 1/6, (banana, banana) 1 -> min
    pytest.param("['apple', 'banana']", "['banana', 'apples']", "List", 5 / 6, id="list-min-anls"),
    pytest.param("['apple', 'banana']", "['apple', 'bxxxxa']", "List", 0.0, id="list-min-zero"),
    pytest.param("['1', '2']", "['2', '1']", "List", 1.0, id="list-numbers-any-order"),
    pytest.param("[1, 2]", "[1.0, 2.0]", "List", 0.0, id="list-numbers-as-text"),  # "1-2" vs "1.0-2.0"
    pytest.param("['1', '2']", "['1', '3']", "List", 0.0, id="list-numbers-differ"),
    pytest.param("[10, 9]", "[9, 10]", "List", 1.0, id="list-numbers-sorted-as-text"),
    pytest.param("['1-2', '3']", "['1', '2-3']", "List", 1.0, id="list-joined-with-dash"),
    pytest.param(
        "['https://a.com/x', 'https://b.com/y']",
        "['https://a.com/x', 'https://b.com/z']",
        "List",
        0.0,
        id="list-exact-type-items",
    ),
    pytest.param("['Alice', 'Bob']", "[Alice, Bob]", "List", 0.0, id="list-unparsable-pred"),
    pytest.param("['Alice', 'Bob']", "Alice, Bob", "List", 0.0, id="list-pred-not-bracketed"),
    pytest.param("Alice", "['Alice']", "List", 1.0, id="list-scalar-gt"),
    pytest.param("[]", "[]", "List", 0.0, id="list-empty"),
    pytest.param(["Circle", "Rectangle"], ["Rectangle", "Circle"], "List", 1.0, id="list-objects"),
    pytest.param("[5]", "[2+3]", "List", 0.0, id="list-expression-not-evaluated"),
]


@pytest.mark.parametrize(("gt", "pred", "answer_format", "expected"), MMLONGBENCH_CASES)
def test_mmlongbench_score(gt: object, pred: object, answer_format: str, expected: float) -> None:
    assert mmlongbench_score(gt, pred, answer_format) == pytest.approx(expected)


@pytest.mark.parametrize("answer_format", MMLONGBENCH_FORMATS)
def test_mmlongbench_none_prediction_scores_zero(answer_format: str) -> None:
    assert mmlongbench_score("8", None, answer_format) == 0.0


# --- aggregates -----------------------------------------------------------------------------


def _mm(answer: str, pred: str, score: float, pages: object, sources: object, doc: str) -> dict:
    return {
        "answer": answer,
        "pred": pred,
        "score": score,
        "evidence_pages": pages,
        "evidence_sources": sources,
        "doc_type": doc,
    }


MM_RECORDS = [
    _mm("8", "8", 1.0, "[5]", "['Chart']", "Report"),
    _mm("Circle", NOT_ANSWERABLE, 0.0, "[3, 4]", "['Chart', 'Table']", "Report"),
    _mm(NOT_ANSWERABLE, NOT_ANSWERABLE, 1.0, "[]", "[]", "Tutorial"),
    _mm(NOT_ANSWERABLE, "12", 0.0, "[]", "[]", "Report"),
    _mm("9259", NOT_ANSWERABLE, 0.0, "[]", "['Table']", "Tutorial"),  # answerable, no pages
    _mm("Europe", "Europe IPO", 0.6, [2], ["Figure"], "Tutorial"),  # list fields as lists
]


def test_mmlongbench_accuracy_and_f1() -> None:
    summary = mmlongbench_aggregate(MM_RECORDS)
    assert summary.count == 6
    assert summary.accuracy == pytest.approx(2.6 / 6)
    # answerable: 8, Circle, 9259, Europe -> recall = 1.6 / 4 = 0.4
    # prediction not "Not answerable": records 1, 4, 6 -> precision = 1.6 / 3
    # f1 = 2 * 0.4 * (1.6/3) / (0.4 + 1.6/3) = 1.28 / 2.8 = 16/35
    assert summary.f1 == pytest.approx(16 / 35)


def test_mmlongbench_breakdowns() -> None:
    summary = mmlongbench_aggregate(MM_RECORDS)
    # single: records 1, 6; cross (pages != 1, answerable): 2, 5; unanswerable: 3, 4
    assert _accuracies(summary.by_evidence_pages) == pytest.approx(
        {"Single-page": 0.8, "Cross-page": 0.0, "Unanswerable": 0.5}
    )
    assert _counts(summary.by_evidence_pages) == {"Single-page": 2, "Cross-page": 2, "Unanswerable": 2}
    # one entry per listed source, in order of first appearance
    assert list(summary.by_evidence_source) == ["Chart", "Table", "Figure"]
    assert _accuracies(summary.by_evidence_source) == pytest.approx(
        {"Chart": 0.5, "Table": 0.0, "Figure": 0.6}
    )
    assert _counts(summary.by_evidence_source) == {"Chart": 2, "Table": 2, "Figure": 1}
    assert _accuracies(summary.by_doc_type) == pytest.approx({"Report": 1 / 3, "Tutorial": 1.6 / 3})
    assert _counts(summary.by_doc_type) == {"Report": 3, "Tutorial": 3}


def test_mmlongbench_f1_counts_only_exact_not_answerable_as_abstention() -> None:
    records = [
        _mm("x", "x", 1.0, "[1]", "['Chart']", "A"),
        _mm(NOT_ANSWERABLE, "not answerable", 1.0, "[]", "[]", "A"),
    ]
    summary = mmlongbench_aggregate(records)
    # recall = 1/1; precision = 1/2 (both predictions differ from "Not answerable"); f1 = 2/3
    assert summary.accuracy == 1.0
    assert summary.f1 == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "records",
    [
        [_mm(NOT_ANSWERABLE, NOT_ANSWERABLE, 1.0, "[]", "[]", "A")],  # no answerable question
        [_mm("x", NOT_ANSWERABLE, 0.0, "[1]", "[]", "A")],  # every prediction abstains
    ],
)
def test_mmlongbench_f1_zero_when_undefined(records: list[dict]) -> None:
    assert mmlongbench_aggregate(records).f1 == 0.0


def test_mmlongbench_empty() -> None:
    summary = mmlongbench_aggregate([])
    assert (summary.accuracy, summary.f1, summary.count) == (0.0, 0.0, 0)
    assert _counts(summary.by_evidence_pages) == {"Single-page": 0, "Cross-page": 0, "Unanswerable": 0}


def test_mmlongbench_aggregate_validates_records() -> None:
    with pytest.raises(ValueError, match="record 0 lacks \\['doc_type'\\]"):
        record = _mm("x", "x", 1.0, "[1]", "[]", "A")
        del record["doc_type"]
        mmlongbench_aggregate([record])
    with pytest.raises(ValueError, match="evidence_pages='page 1'"):
        mmlongbench_aggregate([_mm("x", "x", 1.0, "page 1", "[]", "A")])

"""Parity tests for evals/score_longdocurl.py against the official LongDocURL rules.

Every expected value is worked out by hand from the upstream code (LongDocURL
utils/utils_score_v3.py); the comment beside a case shows the arithmetic where it is not obvious.
"""

from __future__ import annotations

import pytest
from test_score_common import _accuracies, _counts

from docrefrag.evals.score_common import GroupScore
from docrefrag.evals.score_longdocurl import (
    LONGDOCURL_FORMATS,
    longdocurl_aggregate,
    longdocurl_prediction,
    longdocurl_score,
)

LONGDOCURL_CASES = [
    # --- Integer: int() of the cleaned string
    pytest.param(5, "5", "Integer", 1.0, id="int-equal"),
    pytest.param(5, "5.0", "Integer", 0.0, id="int-no-float-parsing"),
    pytest.param(8, "8.9", "Integer", 0.0, id="int-no-truncation"),
    pytest.param(96395, "96,395", "Integer", 1.0, id="int-comma"),
    pytest.param(5, "5 kg", "Integer", 1.0, id="int-kg"),
    pytest.param(100, "100mm", "Integer", 1.0, id="int-mm"),
    pytest.param(100, "100m", "Integer", 1.0, id="int-m"),
    pytest.param(100, "100 meters", "Integer", 1.0, id="int-meters"),
    pytest.param(250, "250 acres", "Integer", 1.0, id="int-acres"),
    pytest.param(12, "12 minutes", "Integer", 1.0, id="int-minutes"),
    pytest.param(3, "3 mile", "Integer", 1.0, id="int-mile"),
    pytest.param(3, "3 miles", "Integer", 1.0, id="int-miles"),
    pytest.param(3, "3 million", "Integer", 1.0, id="int-million"),
    pytest.param(5, "5 thousand", "Integer", 1.0, id="int-thousand"),
    pytest.param(2, "2 billion", "Integer", 1.0, id="int-billion"),
    pytest.param(10, "10 km", "Integer", 0.0, id="int-km-leaves-k"),  # "10 km" -> "10 k"
    pytest.param(7, "£7", "Integer", 1.0, id="int-pound"),
    pytest.param(7, "$7", "Integer", 1.0, id="int-dollar"),
    pytest.param(40, "40%", "Integer", 1.0, id="int-percent"),
    pytest.param(5, "5 (approx.)", "Integer", 1.0, id="int-parens"),
    pytest.param(5, "five", "Integer", 0.0, id="int-words"),
    pytest.param(5, "", "Integer", 0.0, id="int-empty"),
    # --- Float: same matching as MMLongBench, LongDocURL cleaning
    pytest.param(0.5, "50%", "Float", 1.0, id="float-gt-times-100"),
    pytest.param(1234.5, "1,234.5", "Float", 1.0, id="float-comma"),
    pytest.param(2.5, "2.5 million", "Float", 1.0, id="float-million"),
    pytest.param(1.5, "1.5 kg", "Float", 1.0, id="float-kg"),
    pytest.param(3.14, "£3.14", "Float", 1.0, id="float-pound"),
    pytest.param(0.05, "0.054", "Float", 1.0, id="float-rounding-match"),
    pytest.param(0.3, "0.34", "Float", 0.0, id="float-rounding-floor-is-2-places"),
    pytest.param(12.5, "twelve", "Float", 0.0, id="float-words"),
    pytest.param("n/a", "1", "Float", 0.0, id="float-unparsable-gt"),
    # --- String / None
    pytest.param("Europe", "europe", "String", 1.0, id="str-lowercase"),
    pytest.param("Europe IPO", "Europe IPO index", "String", 1 - 6 / 16, id="str-anls-partial"),
    pytest.param("abcd", "abef", "String", 0.0, id="str-anls-exactly-half-is-zero"),
    pytest.param("abcde", "abcxy", "String", 0.6, id="str-anls-above-half"),
    pytest.param("Team", "Tea", "String", 1.0, id="str-rstrip-m-quirk"),  # "team" -> "tea"
    pytest.param("parameters", "para", "String", 1.0, id="str-rstrip-meters-quirk"),
    # units are stripped before parentheses: gt "5 kg", pred "5" -> 1 - 3/4 = 0.25 -> 0
    pytest.param("5 kg (net)", "5 kg", "String", 0.0, id="str-units-before-parens"),
    pytest.param("https://x.org/a", "https://x.org/b", "String", 0.0, id="exact-url"),
    pytest.param("2023-01-15", "2023-01-15", "String", 1.0, id="exact-date-equal"),
    pytest.param("Page 4", "page 4", "String", 1.0, id="exact-page-equal"),
    pytest.param("1,234", "1234", "String", 1.0, id="exact-number-after-comma-removal"),
    pytest.param("Not answerable", "not answerable", "None", 1.0, id="none-equal"),
    # --- List: mean best ANLS per gt item * min(1, len(gt)/len(pred)) ** 0.5
    pytest.param(["apple", "banana", "cherry"], ["apple", "banana"], "List", 2 / 3, id="list-missing"),
    pytest.param(
        ["apple", "banana"], ["apple", "banana", "cherry", "date"], "List", 0.5**0.5, id="list-extra"
    ),
    pytest.param(["apple"], ["apples"], "List", 5 / 6, id="list-item-anls"),
    pytest.param(["alpha", "omega"], ["alpha", "alpha"], "List", 0.5, id="list-best-match-reused"),
    pytest.param(["banana", "apple"], ["apple", "banana"], "List", 1.0, id="list-str-any-order"),
    pytest.param([1, 2], [2, 1], "List", 0.0, id="list-numbers-in-order"),
    pytest.param([1, 2], "[1, 2]", "List", 1.0, id="list-numbers-equal"),
    pytest.param([1, 2], [1, 2, 3], "List", 0.0, id="list-numbers-longer"),
    pytest.param([3, 4], ["3 kg", "4 kg"], "List", 1.0, id="list-numbers-units"),
    pytest.param([1000, 2000], ["1,000", "2,000 kg"], "List", 1.0, id="list-numbers-commas"),
    # "[new york city]" is not a literal: one item of 15 chars, distance 2 -> 13/15
    pytest.param(["new york city"], "[new york city]", "List", 13 / 15, id="list-unparsable-one-item"),
    pytest.param(["Alice", "Bob"], "[Alice, Bob]", "List", 0.0, id="list-unparsable-far"),
    pytest.param(["a"], [], "List", 0.0, id="list-empty-pred"),
    pytest.param(["a"], "[]", "List", 0.0, id="list-empty-pred-text"),
    pytest.param(
        [{"name": "Alice", "age": 30}],
        "[{'name': 'Alice', 'age': 30}]",
        "List",
        1.0,
        id="list-dict-values-joined",
    ),
    pytest.param("['Paris', 'Rome']", ["rome", "paris"], "List", 1.0, id="list-gt-text"),
    pytest.param("Paris", "['Paris']", "List", 1.0, id="list-scalar-gt"),
]


@pytest.mark.parametrize(("gt", "pred", "answer_format", "expected"), LONGDOCURL_CASES)
def test_longdocurl_score(gt: object, pred: object, answer_format: str, expected: float) -> None:
    assert longdocurl_score(gt, pred, answer_format) == pytest.approx(expected)


@pytest.mark.parametrize("answer_format", LONGDOCURL_FORMATS)
def test_longdocurl_none_prediction_scores_zero(answer_format: str) -> None:
    assert longdocurl_score(8, None, answer_format) == 0.0


# --- aggregates -----------------------------------------------------------------------------


def _ldu(task: str, sources: list[str], pages: list[int], score: float) -> dict:
    return {"task_tag": task, "evidence_sources": sources, "evidence_pages": pages, "score": score}


LDU_RECORDS = [
    _ldu("Understanding", ["Text"], [3], 1.0),
    _ldu("Understanding", ["Table", "Figure"], [3, 4], 0.5),
    _ldu("Reasoning", ["Layout", "Text"], [10], 0.0),
    _ldu("Locating", ["Figure", "Other"], [], 0.25),
]


def test_longdocurl_aggregate() -> None:
    summary = longdocurl_aggregate(LDU_RECORDS)
    assert (summary.accuracy, summary.count) == (pytest.approx(1.75 / 4), 4)
    assert _accuracies(summary.by_task) == pytest.approx(
        {"Understanding": 0.75, "Reasoning": 0.0, "Locating": 0.25}
    )
    assert _counts(summary.by_task) == {"Understanding": 2, "Reasoning": 1, "Locating": 1}
    # only Text / Layout / Figure / Table count; "Other" is ignored
    assert _accuracies(summary.by_element) == pytest.approx(
        {"Text": 0.5, "Layout": 0.0, "Figure": 0.375, "Table": 0.5}
    )
    assert _counts(summary.by_element) == {"Text": 2, "Layout": 1, "Figure": 2, "Table": 1}
    # no evidence page: in neither group
    assert _accuracies(summary.by_evidence_pages) == pytest.approx({"Single_Page": 0.5, "Multi_Page": 0.5})
    assert _counts(summary.by_evidence_pages) == {"Single_Page": 2, "Multi_Page": 1}
    # more than one listed source, "Other" included: records 2, 3, 4
    assert summary.cross_element == GroupScore(accuracy=pytest.approx(0.25), count=3)


def test_longdocurl_empty() -> None:
    summary = longdocurl_aggregate([])
    assert (summary.accuracy, summary.count, summary.by_task) == (0.0, 0, {})
    assert summary.cross_element == GroupScore(0.0, 0)


def test_longdocurl_aggregate_validates_records() -> None:
    with pytest.raises(ValueError, match="lacks \\['task_tag'\\]"):
        longdocurl_aggregate([{"score": 1.0, "evidence_pages": [1], "evidence_sources": []}])


# --- upstream's eval of the prediction ---------------------------------------------------


@pytest.mark.parametrize("answer, value", [
    ("96,395", (96, 395)), ("3/4", 0.75), ("-3/4", -0.75), ("2*3", 6), ("{1, 2}", [1, 2]), ('["a", "b"]', ["a", "b"]),
    ("None", None), ("Paris", "Paris"), ("$40", "$40"), ("60%", "60%"), ("__import__('os')", "__import__('os')"),
    ("{[1]}", "{[1]}"), ("(1, 2) + 3", "(1, 2) + 3"),
])
def test_longdocurl_predictions_go_through_upstreams_eval(answer, value):
    """Upstream evaluates the extracted answer with Python's eval (sets become lists) before scoring."""
    assert longdocurl_prediction(answer) == value


def test_longdocurl_scores_what_upstreams_eval_leaves():
    from docrefrag.evals.answers import score
    from docrefrag.evals.datasets import Question

    def q(answer, fmt):
        return Question("q", "longdocurl", "d.pdf", "Q?", answer, fmt, (1,), ())

    assert score(q("96395", "Integer"), "96,395") == 0.0  # a tuple upstream, not the number
    assert score(q("96395", "Integer"), "96395") == 1.0
    assert score(q("0.75", "Float"), "3/4") == 1.0

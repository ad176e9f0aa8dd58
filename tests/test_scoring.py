"""Parity tests for evals/scoring.py against the official MMLongBench-Doc and LongDocURL rules.

Every expected value is worked out by hand from the upstream code (mayubo2333/MMLongBench-Doc
eval/eval_score.py; LongDocURL utils/utils_score_v3.py); the comment beside a case shows the
arithmetic where it is not obvious.
"""

from __future__ import annotations

import pytest
from docrefrag.evals.scoring import (
    EXTRACTION_PROMPT,
    LONGDOCURL_FORMATS,
    MMLONGBENCH_FORMATS,
    NOT_ANSWERABLE,
    GroupScore,
    extraction_messages,
    longdocurl_aggregate,
    longdocurl_score,
    mmlongbench_aggregate,
    mmlongbench_score,
    parse_extraction,
)

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


@pytest.mark.parametrize("answer_format", MMLONGBENCH_FORMATS)
def test_mmlongbench_none_prediction_scores_zero(answer_format: str) -> None:
    assert mmlongbench_score("8", None, answer_format) == 0.0


@pytest.mark.parametrize("answer_format", LONGDOCURL_FORMATS)
def test_longdocurl_none_prediction_scores_zero(answer_format: str) -> None:
    assert longdocurl_score(8, None, answer_format) == 0.0


GARBAGE = ["", "[", "[1, 2", "]]", "[[[[", "nan", "-inf", "%", "$", "()", "\x00", 3.5, [], {}, [None]]


@pytest.mark.parametrize("pred", GARBAGE)
def test_garbage_predictions_do_not_crash(pred: object) -> None:
    for answer_format in MMLONGBENCH_FORMATS:
        assert 0.0 <= mmlongbench_score("['a', 'b']", pred, answer_format) <= 1.0
    for answer_format in LONGDOCURL_FORMATS:
        assert 0.0 <= longdocurl_score(["a", "b"], pred, answer_format) <= 1.0


def test_unknown_formats_are_rejected() -> None:
    with pytest.raises(ValueError, match="'Integer'"):
        mmlongbench_score("8", "8", "Integer")
    with pytest.raises(ValueError, match="'Int'"):
        longdocurl_score(8, "8", "Int")


# --- answer extraction ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Extracted answer: 10\nAnswer format: Integer", ("10", "Integer")),
        ("```\nExtracted answer: ['a', 'b']\nAnswer format: List\n```", ("['a', 'b']", "List")),
        ("Extracted answer: Not answerable\nAnswer format: String", (NOT_ANSWERABLE, "String")),
        ("Extracted answer: line one\nline two\nAnswer format: String", ("line one\nline two", "String")),
        ("Extracted answer: Paris", ("Paris", None)),
        ("Answer format: String\nExtracted answer: x", (None, None)),  # upstream: IndexError
        ("Failed", (None, None)),  # extract_answer.py's reply when the API call fails
        ("", (None, None)),
    ],
)
def test_parse_extraction(reply: str, expected: tuple[str | None, str | None]) -> None:
    assert parse_extraction(reply) == expected


def test_failed_extraction_scores_zero() -> None:
    answer, _ = parse_extraction("Failed")
    assert mmlongbench_score("8", answer, "Int") == 0.0


def test_extraction_prompt_is_verbatim() -> None:
    assert len(EXTRACTION_PROMPT) == 3442  # characters of eval/prompt_for_answer_extraction.md
    assert EXTRACTION_PROMPT.startswith("Given the question and analysis, you are tasked")
    assert "free-form analysis. \n- Your extracted answers" in EXTRACTION_PROMPT
    assert "```\nExtracted answer: [answer]\nAnswer format: [answer format]\n```" in EXTRACTION_PROMPT
    assert "are:\\n\\n1. Is the service safe?" in EXTRACTION_PROMPT  # a literal backslash-n
    assert "'Is the servife safe?'" in EXTRACTION_PROMPT  # upstream typo kept
    assert EXTRACTION_PROMPT.count("---\nQuestion:") == 4
    assert EXTRACTION_PROMPT.endswith("Extracted answer: Fail to answer\nAnswer format: String\n\n---")


def test_extraction_messages() -> None:
    messages = extraction_messages("How many?", "There are 3.")
    assert messages == [
        {"role": "user", "content": EXTRACTION_PROMPT},
        {"role": "assistant", "content": "\n\nQuestion:How many?\nAnalysis:There are 3.\n"},
    ]


# --- aggregates -----------------------------------------------------------------------------


def _accuracies(groups: dict[str, GroupScore]) -> dict[str, float]:
    return {key: group.accuracy for key, group in groups.items()}


def _counts(groups: dict[str, GroupScore]) -> dict[str, int]:
    return {key: group.count for key, group in groups.items()}


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


@pytest.mark.parametrize("answer, value", [
    ("96,395", (96, 395)), ("3/4", 0.75), ("-3/4", -0.75), ("2*3", 6), ("{1, 2}", [1, 2]), ('["a", "b"]', ["a", "b"]),
    ("None", None), ("Paris", "Paris"), ("$40", "$40"), ("60%", "60%"), ("__import__('os')", "__import__('os')"),
    ("{[1]}", "{[1]}"), ("(1, 2) + 3", "(1, 2) + 3"),
])
def test_longdocurl_predictions_go_through_upstreams_eval(answer, value):
    """Upstream evaluates the extracted answer with Python's eval (sets become lists) before scoring."""
    from docrefrag.evals.scoring import longdocurl_prediction

    assert longdocurl_prediction(answer) == value


def test_longdocurl_scores_what_upstreams_eval_leaves():
    from docrefrag.evals.answers import score
    from docrefrag.evals.datasets import Question

    def q(answer, fmt):
        return Question("q", "longdocurl", "d.pdf", "Q?", answer, fmt, (1,), ())

    assert score(q("96395", "Integer"), "96,395") == 0.0  # a tuple upstream, not the number
    assert score(q("96395", "Integer"), "96395") == 1.0
    assert score(q("0.75", "Float"), "3/4") == 1.0

"""Official answer scoring of MMLongBench-Doc and LongDocURL, re-implemented without ``eval``.

Rules and where they come from (the upstream code ``eval``s list answers and prints while
scoring; this module re-states its rules and gives the same scores):

- MMLongBench-Doc, github.com/mayubo2333/MMLongBench-Doc:
  ``eval/eval_score.py`` (``eval_score``: cleaning, Int / Float / Str / None / List rules,
  ANLS; ``eval_acc_and_f1``: accuracy and F1; ``show_results``: the breakdowns),
  ``eval/prompt_for_answer_extraction.md`` (:data:`EXTRACTION_PROMPT`),
  ``eval/extract_answer.py`` (how the extractor is called: :func:`extraction_messages`) and
  ``run_api.py`` / ``run_lvlm.py`` (how its reply is parsed: :func:`parse_extraction`; a reply
  that cannot be parsed, or a scorer that raises, scores 0).
- LongDocURL, github.com/dengc2023/LongDocURL: ``utils/utils_score_v3.py`` (``eval_score``;
  the upstream tree ships only its ``.pyc``, the source was read from verbatim vendored
  copies), ``utils/calculate_metrics.py`` (overall accuracy) and
  ``utils/calculate_metrics_fine_grained.py`` (accuracy by task, element type, evidence pages
  and cross-element questions).

Upstream quirks kept on purpose, since they change scores:

- Int (MMLongBench) is ``int(gt) == int(float(pred))``: a float prediction is truncated and
  the prediction is not cleaned (``"$8"`` scores 0). Integer (LongDocURL) is ``int()`` of the
  cleaned string: ``"8.0"`` scores 0.
- MMLongBench's cleaning tests for "mile"/"miles"/"million" suffixes but discards the result,
  so nothing is removed; it keeps commas. LongDocURL's cleaning removes commas and strips unit
  suffixes with ``str.rstrip``, which drops a trailing *run of the unit's letters*: "team"
  becomes "tea", "parameters" becomes "para", "10 km" becomes "10 k". Suffixes are checked
  before parentheses and quotes are removed, so "5 kg (net)" keeps its "kg".
- Float: the ground truth, gt/100 and gt*100 are each tried, first with ``math.isclose``
  (rel_tol 0.01), then by rounding both to max(min(d_pred, d_gt), 2) places, where d is the
  number of characters after the "." of ``str(x)`` (3 when there is none, and "5e-05" for
  1.5e-05, as upstream counts them).
- ANLS is 1 - Levenshtein / max(len(gt.upper()), len(pred.upper())) and is 0 when <= 0.5.
- MMLongBench lists are sorted before comparison (numbers as strings) and joined with "-"
  when exact, so ['1-2', '3'] equals ['1', '2-3']. LongDocURL lists are not sorted: numeric
  lists are compared in order.

Departures, none of them on well-formed benchmark data:

- List literals are read with :func:`ast.literal_eval`. Where upstream's ``eval`` fails
  (``[Alice, Bob]``) MMLongBench scores 0 (its caller catches the error) and LongDocURL scores
  the raw string as one item; both are reproduced. Expressions that only ``eval`` accepts
  (``[2+3]``, which upstream scores like ``[5]``) are not evaluated and score as unparsable.
- Empty lists and an unparsable ground truth score 0 where upstream raises. A ``None``
  prediction (a failed extraction, see :func:`parse_extraction`) scores 0. An empty Int /
  Integer ground truth scores 0; upstream gives it 1.0 against any unparsable prediction.
- An unknown answer format raises ``ValueError``; upstream silently applies the List rule.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOT_ANSWERABLE = "Not answerable"
MMLONGBENCH_FORMATS = ("Int", "Float", "Str", "None", "List")
LONGDOCURL_FORMATS = ("Integer", "Float", "String", "None", "List")

ANLS_THRESHOLD = 0.5
_LONGDOCURL_UNITS = (
    "kg", "mm", "m", "meters", "acres", "minutes", "mile", "miles", "million", "thousand", "billion",
)
_LONGDOCURL_ELEMENTS = ("Text", "Layout", "Figure", "Table")
_MMLONGBENCH_PAGE_GROUPS = ("Single-page", "Cross-page", "Unanswerable")
_LONGDOCURL_PAGE_GROUPS = ("Single_Page", "Multi_Page")

_PARENTHESISED = re.compile(r"\s*\([^)]*\)")
_EDGE_QUOTE = re.compile(r"^['\"]|['\"]$")
_NUMBER_LIKE = re.compile(r"\b\d+(-\d+|\s\d+)?\b")  # phone numbers, "2015-2016", "9259"
_YEAR_MONTH_DAY = re.compile(r"\b\d{4}[-\s]\d{2}([-\s]\d{2})?\b")
_EMAIL = re.compile(r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}")

# MMLongBench-Doc's eval/prompt_for_answer_extraction.md verbatim, typos and literal
# backslash-n sequences included.
EXTRACTION_PROMPT = (
    "Given the question and analysis, you are tasked to extract answers with required "
    "formats from the free-form analysis. \n"
    "- Your extracted answers should be one of the following formats: (1) Integer, (2) "
    "Float, (3) String and (4) List. If you find the analysis the question can not be "
    "answered from the given documents, type \"Not answerable\". Exception: If the analysis "
    "only tells you that it can not read/understand the images or documents, type \"Fail to "
    "answer\".\n"
    "- Please make your response as concise as possible. Also note that your response should "
    "be formatted as below:\n"
    "```\n"
    "Extracted answer: [answer]\n"
    "Answer format: [answer format]\n"
    "```\n"
    "\n"
    "Please read the following example, then extract the answer from the model response and "
    "type it at the end of the prompt. \n"
    "\n"
    "---\n"
    "Question: List the primary questions asked about the services in this report.\n"
    "Analysis:  The primary questions asked about the services in the report for The Limes "
    "Residential Home are:\\n\\n1. Is the service safe?\\n2. Is the service effective?\\n3. "
    "Is the service caring?\\n4. Is the service responsive?\\n5. Is the service well-led?\n"
    "Extracted answer: ['Is the servife safe?', 'Is the service effective', 'Is the serve "
    "caring?', 'Is the service responsive?', 'Is the service well-led?']\n"
    "Answer format: List\n"
    "\n"
    "---\n"
    "Question: How many regulations of the HSCA 2008 are breached in all according to this "
    "report?\n"
    "Analysis: According to the report, the provider breached 10 Health and Social Care Act "
    "2008 (Regulated Activities) Regulations in total. Here are the specifics:\\n\\n1. "
    "Regulation 13: Safeguarding service users from abuse and improper treatment\\n2. "
    "Regulation 12: Safe care and treatment\\n3. Regulation 18: Staffing\\n4. Regulation 11: "
    "Need for consent\\n5. Regulation 10: Dignity and respect\\n6. Regulation 9: "
    "Person-centred care\\n7. Regulation 17: Good governance\\n8. Regulation 18 (CQC "
    "Registration Regulations 2009): Notification of other incidents\\n9. Regulation 18: "
    "Failure to maintain an accurate and up-to-date care plan\\n10. Regulation 11: Failure "
    "to implement the Mental Capacity Act 2005 code of practice effectively\\n\\nThese "
    "breaches involve issues concerning staffing, safeguarding, medicines management, "
    "dignity and respect, consent, care planning, governance, and failure to notify the CQC "
    "of incidents.\n"
    "Extracted answer: 10\n"
    "Answer format: Integer\n"
    "\n"
    "---\n"
    "Question: According to the survey that is the percentage of Chinese who are paying more "
    "or about the same attention to politics after Trump's election?\n"
    "Analysis: The survey provided does not specify the percentage of Chinese individuals "
    "specifically who are paying more or about the same attention to politics after Trump's "
    "election. The report focuses primarily on American demographics and does not include "
    "specific details about the Chinese population in relation to this question. If you need "
    "information about a different demographic or a summary of the findings from the "
    "American demographic, I can certainly help with that!\n"
    "Extracted answer: Not answerable\n"
    "Answer format: String\n"
    "\n"
    "---\n"
    "Question: How many quotations from male respondent over 50 years old are included in "
    "this report?\n"
    "Analysis: The image you've provided appears to be a screenshot of a document with "
    "multiple charts. However, the text is too small and blurry to read accurately. If you "
    "can provide a clearer image or more context, I might be able to help you with your "
    "question.\n"
    "Extracted answer: Fail to answer\n"
    "Answer format: String\n"
    "\n"
    "---"
)


# --- shared rules -------------------------------------------------------------------------


def _levenshtein(a: str, b: str) -> int:
    if len(a) > len(b):
        a, b = b, a
    previous = list(range(len(a) + 1))
    for j, char_b in enumerate(b, start=1):
        current = [j]
        for i, char_a in enumerate(a, start=1):
            substitution = previous[i - 1] + (char_a != char_b)
            current.append(min(substitution, previous[i] + 1, current[i - 1] + 1))
        previous = current
    return previous[-1]


def similarity(gt: str, pred: str) -> float:
    """1 - normalised Levenshtein distance (ANLS before its threshold)."""
    length = max(len(gt.upper()), len(pred.upper()))  # upstream: "ß".upper() == "SS" counts 2
    return 1.0 - (_levenshtein(gt, pred) / length if length else 0.0)


def anls(gt: str, pred: str) -> float:
    """1 - normalised Levenshtein distance, 0 at or below the 0.5 threshold."""
    value = similarity(gt, pred)
    return value if value > ANLS_THRESHOLD else 0.0


def _is_exact_match_type(text: str) -> bool:
    """Ground truths compared exactly: URLs, code files, "page ...", numbers, times, dates, e-mails."""
    return (
        "https://" in text
        or text.endswith((".py", "ipynb"))
        or text.startswith("page")
        or "a.m." in text
        or "p.m." in text
        or any(pattern.fullmatch(text) for pattern in (_NUMBER_LIKE, _YEAR_MONTH_DAY, _EMAIL))
    )


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _to_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _decimals(value: float) -> int:
    """Characters after the "." of ``str(value)``, 3 without one (upstream ``get_precision``)."""
    text = str(value)
    return len(text.split(".")[-1]) if "." in text else 3


def _floats_match(gt: float, pred: float) -> bool:
    """Upstream ``is_float_equal(gt, pred, include_percentage=True, is_close=True)``."""
    for target in (gt / 100, gt, gt * 100):
        if math.isclose(target, pred, rel_tol=0.01):
            return True
        digits = max(min(_decimals(pred), _decimals(target)), 2)
        if round(pred, digits) == round(target, digits):
            return True
    return False


def _float_score(gt: str, pred: str) -> float:
    gt_value, pred_value = _to_float(gt), _to_float(pred)
    if gt_value is None or pred_value is None:
        return 0.0
    return float(_floats_match(gt_value, pred_value))


def _string_score(gt: str, pred: str) -> float:
    if _is_exact_match_type(gt):
        return float(gt == pred)
    return anls(gt, pred)


def _strip_decorations(text: str, currencies: str) -> str:
    text = _PARENTHESISED.sub("", text).strip()
    text = _EDGE_QUOTE.sub("", text).strip()
    for symbol in currencies:
        text = text.lstrip(symbol).strip()
    return text.rstrip("%").strip()


def _literal(value: object) -> object:
    """Parse a string that starts with "[" (upstream ``eval``s it); other values pass through.

    Raises ``ValueError`` when the string is not a Python literal.
    """
    if not (isinstance(value, str) and value.startswith("[")):
        return value
    try:
        return ast.literal_eval(value)
    except (SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a Python literal: {value!r}") from exc


def _as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _check_format(answer_format: str, known: tuple[str, ...], benchmark: str) -> None:
    if answer_format not in known:
        raise ValueError(
            f"unknown {benchmark} answer format {answer_format!r}; expected one of {known}"
        )


# --- MMLongBench-Doc ----------------------------------------------------------------------


def _clean_mmlongbench(value: object) -> str:
    return _strip_decorations(str(value).lower().strip(), currencies="$")


def _mmlongbench_int(gt: object, pred: object) -> float:
    try:
        return float(int(gt) == int(float(pred)))
    except (TypeError, ValueError, OverflowError):
        return 0.0


def _mmlongbench_list(gt: object, pred: object) -> float:
    try:
        gt_items, pred_items = _as_list(_literal(gt)), _as_list(_literal(pred))
    except ValueError:
        return 0.0
    if not gt_items or len(gt_items) != len(pred_items):
        return 0.0
    gt_clean = sorted(_clean_mmlongbench(item) for item in gt_items)
    pred_clean = sorted(_clean_mmlongbench(item) for item in pred_items)
    if _to_float(gt_clean[0]) is not None or _is_exact_match_type(gt_clean[0]):
        return float("-".join(gt_clean) == "-".join(pred_clean))
    return min(anls(g, p) for g, p in zip(gt_clean, pred_clean))


def mmlongbench_score(gt: object, pred: object, answer_format: str) -> float:
    """Score of one MMLongBench-Doc answer in [0, 1], as upstream ``eval_score``.

    ``gt`` and ``pred`` are strings as in ``samples.json`` and the extractor's reply (a list
    may also be given as a Python list); ``answer_format`` is the ground truth's format, one
    of :data:`MMLONGBENCH_FORMATS`.
    """
    _check_format(answer_format, MMLONGBENCH_FORMATS, "MMLongBench-Doc")
    if pred is None:
        return 0.0
    if answer_format == "Int":
        return _mmlongbench_int(gt, pred)
    if answer_format == "Float":
        return _float_score(_clean_mmlongbench(gt), _clean_mmlongbench(pred))
    if answer_format == "List":
        return _mmlongbench_list(gt, pred)
    return _string_score(_clean_mmlongbench(gt), _clean_mmlongbench(pred))


# --- LongDocURL ---------------------------------------------------------------------------


def _clean_longdocurl(value: object) -> str:
    text = str(value).lower().strip().replace(",", "")
    for unit in _LONGDOCURL_UNITS:
        if text.endswith(unit):
            text = text.rstrip(unit).strip()  # a character set, as upstream: "team" -> "tea"
    return _strip_decorations(text, currencies="$£")


def _literal_or_text(value: object) -> object:
    try:
        return _literal(value)
    except ValueError:
        return value  # upstream: `except: pred = pred`, the string becomes one item


def _join_dict_values(items: list[Any]) -> list[Any]:
    if not isinstance(items[0], dict):
        return items
    return [
        "-".join(str(v) for v in item.values()) if isinstance(item, dict) else item
        for item in items
    ]


def _longdocurl_int(gt: object, pred: object) -> float:
    gt_value = _to_int(_clean_longdocurl(gt))
    pred_value = _to_int(_clean_longdocurl(pred))
    if gt_value is None or pred_value is None:
        return 0.0
    return float(gt_value == pred_value)


def _longdocurl_list(gt: object, pred: object) -> float:
    gt_items, pred_items = _as_list(_literal_or_text(gt)), _as_list(_literal_or_text(pred))
    if not gt_items or not pred_items:
        return 0.0
    gt_clean = [_clean_longdocurl(item) for item in _join_dict_values(gt_items)]
    pred_clean = [_clean_longdocurl(item) for item in _join_dict_values(pred_items)]
    if _to_float(gt_clean[0]) is not None or _is_exact_match_type(gt_clean[0]):
        return float("-".join(gt_clean) == "-".join(pred_clean))
    best = [max(anls(g, p) for p in pred_clean) for g in gt_clean]
    return sum(best) / len(gt_clean) * min(1, len(gt_clean) / len(pred_clean)) ** 0.5


def longdocurl_score(gt: object, pred: object, answer_format: str) -> float:
    """Score of one LongDocURL answer in [0, 1], as upstream ``utils_score_v3.eval_score``.

    ``gt`` is the dataset's JSON value (int, float, str or list); ``pred`` a string or list;
    ``answer_format`` one of :data:`LONGDOCURL_FORMATS`. Lists earn partial credit: the mean
    over ground-truth items of their best ANLS against any predicted item, times
    ``min(1, len(gt) / len(pred)) ** 0.5``; lists of numbers (or other exact-match items) must
    match exactly, in order.
    """
    _check_format(answer_format, LONGDOCURL_FORMATS, "LongDocURL")
    if pred is None:
        return 0.0
    if answer_format == "Integer":
        return _longdocurl_int(gt, pred)
    if answer_format == "Float":
        return _float_score(_clean_longdocurl(gt), _clean_longdocurl(pred))
    if answer_format == "List":
        return _longdocurl_list(gt, pred)
    return _string_score(_clean_longdocurl(gt), _clean_longdocurl(pred))


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def longdocurl_prediction(answer: str | None) -> object:
    """The prediction upstream scores: LongDocURL's ``eval_api_models.py`` passes the extracted
    answer through Python's ``eval`` (a set becomes a list) and keeps the text where that fails.
    Emulated without ``eval``: literals (numbers, strings, tuples, lists, sets, None) and
    arithmetic on numbers (``3/4``); so ``"96,395"`` becomes the tuple ``(96, 395)``, as upstream.
    """
    if answer is None:
        return None
    try:
        value = _evaluated(ast.parse(answer.strip(), mode="eval").body)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError):
        return answer
    return list(value) if isinstance(value, set) else value


def _evaluated(node: ast.AST) -> object:
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _evaluated(node.left), _evaluated(node.right)
        if not all(type(v) in (int, float) for v in (left, right)):
            raise ValueError("arithmetic on something else than numbers")
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.Tuple):
        return tuple(_evaluated(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_evaluated(e) for e in node.elts]
    if isinstance(node, ast.Set):
        return {_evaluated(e) for e in node.elts}
    return ast.literal_eval(node)


# --- answer extraction (MMLongBench-Doc protocol) -----------------------------------------


def extraction_messages(question: str, response: str) -> list[dict[str, str]]:
    """Chat messages of the official extractor call (``eval/extract_answer.py``).

    The prompt is the user turn and the question with the free-form response is a prefilled
    assistant turn; upstream samples gpt-4o with temperature 0 and max_tokens 256.
    """
    return [
        {"role": "user", "content": EXTRACTION_PROMPT},
        {"role": "assistant", "content": f"\n\nQuestion:{question}\nAnalysis:{response}\n"},
    ]


def parse_extraction(text: str) -> tuple[str | None, str | None]:
    """``(answer, format)`` from an extractor reply "Extracted answer: ...\\nAnswer format: ...".

    The answer is what upstream keeps, ``text.split("Answer format:")[0].split("Extracted
    answer:")[1].strip()``; ``(None, None)`` where that fails (upstream then scores 0, as the
    scorers here do for a ``None`` prediction). The format is the first line after "Answer
    format:", ``None`` if absent; scoring uses the ground truth's format, not this one.
    """
    head, marker, tail = text.partition("Answer format:")
    parts = head.split("Extracted answer:")
    if len(parts) < 2:
        return None, None
    answer_format = tail.strip().splitlines()[0].strip() if marker and tail.strip() else None
    return parts[1].strip(), answer_format


# --- aggregates ---------------------------------------------------------------------------

Record = Mapping[str, Any]


@dataclass(frozen=True)
class GroupScore:
    """Mean score of a group of questions, and how many there are."""

    accuracy: float
    count: int


@dataclass(frozen=True)
class MMLongBenchSummary:
    """The numbers of upstream ``show_results``."""

    accuracy: float
    f1: float
    count: int
    by_evidence_pages: dict[str, GroupScore]  # Single-page / Cross-page / Unanswerable
    by_evidence_source: dict[str, GroupScore]  # a question counts once per listed source
    by_doc_type: dict[str, GroupScore]


@dataclass(frozen=True)
class LongDocURLSummary:
    """The numbers of upstream ``calculate_metrics`` and ``calculate_metrics_fine_grained``."""

    accuracy: float
    count: int
    by_task: dict[str, GroupScore]  # Main_Task, keyed by task_tag
    by_element: dict[str, GroupScore]  # Element_Type: Text / Layout / Figure / Table
    by_evidence_pages: dict[str, GroupScore]  # Single_Page / Multi_Page
    cross_element: GroupScore  # Num_of_Element_Types: more than one evidence source


def _require_keys(records: Sequence[Record], keys: tuple[str, ...]) -> None:
    for index, record in enumerate(records):
        missing = [key for key in keys if key not in record]
        if missing:
            raise ValueError(f"record {index} lacks {missing}; every record needs {list(keys)}")


def _list_field(record: Record, key: str) -> list[Any]:
    """A list field, also in the string form of MMLongBench's ``samples.json`` ("[5, 6]")."""
    value = record[key]
    if not isinstance(value, str):
        return list(value)
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"{key}={value!r} is not a list literal such as \"[5, 6]\"") from exc
    return list(parsed)


def _grouped(
    records: Sequence[Record],
    keys_of: Callable[[Record], Iterable[str]],
    fixed: tuple[str, ...] = (),
) -> dict[str, GroupScore]:
    """Mean score per key; a record joins every key it yields (repeats included, as upstream)."""
    groups: dict[str, list[float]] = {key: [] for key in fixed}
    for record in records:
        for key in keys_of(record):
            groups.setdefault(key, []).append(record["score"])
    return {
        key: GroupScore(sum(scores) / len(scores) if scores else 0.0, len(scores))
        for key, scores in groups.items()
    }


def _accuracy_and_f1(records: Sequence[Record]) -> tuple[float, float]:
    """Upstream ``eval_acc_and_f1``: recall over answerable questions, precision over questions
    whose prediction is not exactly "Not answerable", both with the answerable questions' scores."""
    if not records:
        return 0.0, 0.0
    accuracy = sum(record["score"] for record in records) / len(records)
    answerable = [record["score"] for record in records if record["answer"] != NOT_ANSWERABLE]
    answered = sum(1 for record in records if record["pred"] != NOT_ANSWERABLE)
    if not answerable or not answered:
        return accuracy, 0.0
    recall = sum(answerable) / len(answerable)
    precision = sum(answerable) / answered
    f1 = 2 * recall * precision / (recall + precision) if recall + precision > 0.0 else 0.0
    return accuracy, f1


def _mmlongbench_page_groups(record: Record) -> list[str]:
    pages = len(_list_field(record, "evidence_pages"))
    answerable = record["answer"] != NOT_ANSWERABLE
    flags = (pages == 1, pages != 1 and answerable, not answerable)
    return [name for name, member in zip(_MMLONGBENCH_PAGE_GROUPS, flags) if member]


def mmlongbench_aggregate(records: Sequence[Record]) -> MMLongBenchSummary:
    """Accuracy, F1 and breakdowns of scored MMLongBench-Doc questions.

    Each record needs ``answer``, ``pred``, ``score``, ``evidence_pages``,
    ``evidence_sources`` and ``doc_type`` (list fields as lists or as their string form).
    """
    _require_keys(
        records, ("answer", "pred", "score", "evidence_pages", "evidence_sources", "doc_type")
    )
    accuracy, f1 = _accuracy_and_f1(records)
    return MMLongBenchSummary(
        accuracy=accuracy,
        f1=f1,
        count=len(records),
        by_evidence_pages=_grouped(records, _mmlongbench_page_groups, _MMLONGBENCH_PAGE_GROUPS),
        by_evidence_source=_grouped(records, lambda r: _list_field(r, "evidence_sources")),
        by_doc_type=_grouped(records, lambda r: [r["doc_type"]]),
    )


def _longdocurl_page_groups(record: Record) -> list[str]:
    pages = len(_list_field(record, "evidence_pages"))
    return ["Single_Page"] if pages == 1 else ["Multi_Page"] if pages > 1 else []


def longdocurl_aggregate(records: Sequence[Record]) -> LongDocURLSummary:
    """Overall accuracy and breakdowns of scored LongDocURL questions.

    Each record needs ``score``, ``task_tag``, ``evidence_pages`` and ``evidence_sources``.
    Upstream divides each group's score sum by that group's size in the full benchmark; here
    the size is counted in ``records``, which is the same number when all questions are scored.
    """
    _require_keys(records, ("score", "task_tag", "evidence_pages", "evidence_sources"))
    scores = [record["score"] for record in records]
    sources = [_list_field(record, "evidence_sources") for record in records]
    cross = [score for score, names in zip(scores, sources) if len(names) > 1]
    return LongDocURLSummary(
        accuracy=sum(scores) / len(scores) if scores else 0.0,
        count=len(records),
        by_task=_grouped(records, lambda r: [r["task_tag"]]),
        by_element=_grouped(
            records,
            lambda r: [s for s in _list_field(r, "evidence_sources") if s in _LONGDOCURL_ELEMENTS],
            _LONGDOCURL_ELEMENTS,
        ),
        by_evidence_pages=_grouped(records, _longdocurl_page_groups, _LONGDOCURL_PAGE_GROUPS),
        cross_element=GroupScore(sum(cross) / len(cross) if cross else 0.0, len(cross)),
    )

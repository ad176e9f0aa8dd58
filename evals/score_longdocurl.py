"""Official answer scoring of LongDocURL, re-implemented without ``eval``.

Source: github.com/dengc2023/LongDocURL ``utils/utils_score_v3.py`` (``eval_score``; the upstream
tree ships only its ``.pyc``, the source was read from verbatim vendored copies),
``utils/calculate_metrics.py`` (overall accuracy) and ``utils/calculate_metrics_fine_grained.py``
(accuracy by task, element type, evidence pages and cross-element questions). The Float, String
and ANLS rules it shares with MMLongBench-Doc are in evals/score_common.py.

Upstream quirks kept on purpose, since they change scores:

- Integer is ``int()`` of the cleaned string: ``"8.0"`` scores 0.
- The cleaning removes commas and strips unit suffixes with ``str.rstrip``, which drops a
  trailing *run of the unit's letters*: "team" becomes "tea", "parameters" becomes "para",
  "10 km" becomes "10 k". Suffixes are checked before parentheses and quotes are removed, so
  "5 kg (net)" keeps its "kg".
- Lists are not sorted: numeric lists are compared in order.

Departures, none of them on well-formed benchmark data: a list upstream's ``eval`` fails on is
scored as the raw string, one item, as upstream; empty lists and an unparsable ground truth score
0 where upstream raises; an empty Integer ground truth and a ``None`` prediction score 0.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from docrefrag.evals.score_common import (
    GroupScore,
    Record,
    anls,
    as_list,
    check_format,
    float_score,
    grouped,
    is_exact_match_type,
    list_field,
    parse_literal,
    require_keys,
    string_score,
    strip_decorations,
    to_float,
)

LONGDOCURL_FORMATS = ("Integer", "Float", "String", "None", "List")
_LONGDOCURL_UNITS = (
    "kg", "mm", "m", "meters", "acres", "minutes", "mile", "miles", "million", "thousand", "billion",
)
_LONGDOCURL_ELEMENTS = ("Text", "Layout", "Figure", "Table")
_LONGDOCURL_PAGE_GROUPS = ("Single_Page", "Multi_Page")


# --- scores -----------------------------------------------------------------------------


def _clean_longdocurl(value: object) -> str:
    text = str(value).lower().strip().replace(",", "")
    for unit in _LONGDOCURL_UNITS:
        if text.endswith(unit):
            text = text.rstrip(unit).strip()  # a character set, as upstream: "team" -> "tea"
    return strip_decorations(text, currencies="$£")


def _literal_or_text(value: object) -> object:
    try:
        return parse_literal(value)
    except ValueError:
        return value  # upstream: `except: pred = pred`, the string becomes one item


def _join_dict_values(items: list[Any]) -> list[Any]:
    if not isinstance(items[0], dict):
        return items
    return [
        "-".join(str(v) for v in item.values()) if isinstance(item, dict) else item
        for item in items
    ]


def _to_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _longdocurl_int(gt: object, pred: object) -> float:
    gt_value = _to_int(_clean_longdocurl(gt))
    pred_value = _to_int(_clean_longdocurl(pred))
    if gt_value is None or pred_value is None:
        return 0.0
    return float(gt_value == pred_value)


def _longdocurl_list(gt: object, pred: object) -> float:
    gt_items, pred_items = as_list(_literal_or_text(gt)), as_list(_literal_or_text(pred))
    if not gt_items or not pred_items:
        return 0.0
    gt_clean = [_clean_longdocurl(item) for item in _join_dict_values(gt_items)]
    pred_clean = [_clean_longdocurl(item) for item in _join_dict_values(pred_items)]
    if to_float(gt_clean[0]) is not None or is_exact_match_type(gt_clean[0]):
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
    check_format(answer_format, LONGDOCURL_FORMATS, "LongDocURL")
    if pred is None:
        return 0.0
    if answer_format == "Integer":
        return _longdocurl_int(gt, pred)
    if answer_format == "Float":
        return float_score(_clean_longdocurl(gt), _clean_longdocurl(pred))
    if answer_format == "List":
        return _longdocurl_list(gt, pred)
    return string_score(_clean_longdocurl(gt), _clean_longdocurl(pred))


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


# --- aggregates -------------------------------------------------------------------------


@dataclass(frozen=True)
class LongDocURLSummary:
    """The numbers of upstream ``calculate_metrics`` and ``calculate_metrics_fine_grained``."""

    accuracy: float
    count: int
    by_task: dict[str, GroupScore]  # Main_Task, keyed by task_tag
    by_element: dict[str, GroupScore]  # Element_Type: Text / Layout / Figure / Table
    by_evidence_pages: dict[str, GroupScore]  # Single_Page / Multi_Page
    cross_element: GroupScore  # Num_of_Element_Types: more than one evidence source


def _longdocurl_page_groups(record: Record) -> list[str]:
    pages = len(list_field(record, "evidence_pages"))
    return ["Single_Page"] if pages == 1 else ["Multi_Page"] if pages > 1 else []


def longdocurl_aggregate(records: Sequence[Record]) -> LongDocURLSummary:
    """Overall accuracy and breakdowns of scored LongDocURL questions.

    Each record needs ``score``, ``task_tag``, ``evidence_pages`` and ``evidence_sources``.
    Upstream divides each group's score sum by that group's size in the full benchmark; here
    the size is counted in ``records``, which is the same number when all questions are scored.
    """
    require_keys(records, ("score", "task_tag", "evidence_pages", "evidence_sources"))
    scores = [record["score"] for record in records]
    sources = [list_field(record, "evidence_sources") for record in records]
    cross = [score for score, names in zip(scores, sources, strict=False) if len(names) > 1]
    return LongDocURLSummary(
        accuracy=sum(scores) / len(scores) if scores else 0.0,
        count=len(records),
        by_task=grouped(records, lambda r: [r["task_tag"]]),
        by_element=grouped(
            records,
            lambda r: [s for s in list_field(r, "evidence_sources") if s in _LONGDOCURL_ELEMENTS],
            _LONGDOCURL_ELEMENTS,
        ),
        by_evidence_pages=grouped(records, _longdocurl_page_groups, _LONGDOCURL_PAGE_GROUPS),
        cross_element=GroupScore(sum(cross) / len(cross) if cross else 0.0, len(cross)),
    )

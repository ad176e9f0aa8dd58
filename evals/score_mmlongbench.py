"""Official answer scoring of MMLongBench-Doc, re-implemented without ``eval``.

Source: github.com/mayubo2333/MMLongBench-Doc ``eval/eval_score.py`` (``eval_score``: cleaning,
Int / Float / Str / None / List rules, ANLS; ``eval_acc_and_f1``: accuracy and F1;
``show_results``: the breakdowns). The Float, Str and ANLS rules it shares with LongDocURL are
in evals/score_common.py; the answer extraction before scoring is in evals/extraction.py.

Upstream quirks kept on purpose, since they change scores:

- Int is ``int(gt) == int(float(pred))``: a float prediction is truncated and the prediction
  is not cleaned (``"$8"`` scores 0).
- The cleaning tests for "mile"/"miles"/"million" suffixes but discards the result, so nothing
  is removed; it keeps commas.
- Lists are sorted before comparison (numbers as strings) and joined with "-" when exact, so
  ['1-2', '3'] equals ['1', '2-3'].

Departures, none of them on well-formed benchmark data: a list upstream's ``eval`` fails on
(``[Alice, Bob]``) scores 0, as upstream's caller catches the error; empty lists and an
unparsable ground truth score 0 where upstream raises; an empty Int ground truth scores 0
(upstream: 1.0 against any unparsable prediction); a ``None`` prediction scores 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from docrefrag.agents.prompts import NOT_ANSWERABLE
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

MMLONGBENCH_FORMATS = ("Int", "Float", "Str", "None", "List")
_MMLONGBENCH_PAGE_GROUPS = ("Single-page", "Cross-page", "Unanswerable")


# --- scores -----------------------------------------------------------------------------


def _clean_mmlongbench(value: object) -> str:
    return strip_decorations(str(value).lower().strip(), currencies="$")


def _mmlongbench_int(gt: object, pred: object) -> float:
    try:
        return float(int(gt) == int(float(pred)))
    except (TypeError, ValueError, OverflowError):
        return 0.0


def _mmlongbench_list(gt: object, pred: object) -> float:
    try:
        gt_items, pred_items = as_list(parse_literal(gt)), as_list(parse_literal(pred))
    except ValueError:
        return 0.0
    if not gt_items or len(gt_items) != len(pred_items):
        return 0.0
    gt_clean = sorted(_clean_mmlongbench(item) for item in gt_items)
    pred_clean = sorted(_clean_mmlongbench(item) for item in pred_items)
    if to_float(gt_clean[0]) is not None or is_exact_match_type(gt_clean[0]):
        return float("-".join(gt_clean) == "-".join(pred_clean))
    return min(anls(g, p) for g, p in zip(gt_clean, pred_clean, strict=False))


def mmlongbench_score(gt: object, pred: object, answer_format: str) -> float:
    """Score of one MMLongBench-Doc answer in [0, 1], as upstream ``eval_score``.

    ``gt`` and ``pred`` are strings as in ``samples.json`` and the extractor's reply (a list
    may also be given as a Python list); ``answer_format`` is the ground truth's format, one
    of :data:`MMLONGBENCH_FORMATS`.
    """
    check_format(answer_format, MMLONGBENCH_FORMATS, "MMLongBench-Doc")
    if pred is None:
        return 0.0
    if answer_format == "Int":
        return _mmlongbench_int(gt, pred)
    if answer_format == "Float":
        return float_score(_clean_mmlongbench(gt), _clean_mmlongbench(pred))
    if answer_format == "List":
        return _mmlongbench_list(gt, pred)
    return string_score(_clean_mmlongbench(gt), _clean_mmlongbench(pred))


# --- aggregates -------------------------------------------------------------------------


@dataclass(frozen=True)
class MMLongBenchSummary:
    """The numbers of upstream ``show_results``."""

    accuracy: float
    f1: float
    count: int
    by_evidence_pages: dict[str, GroupScore]  # Single-page / Cross-page / Unanswerable
    by_evidence_source: dict[str, GroupScore]  # a question counts once per listed source
    by_doc_type: dict[str, GroupScore]


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
    pages = len(list_field(record, "evidence_pages"))
    answerable = record["answer"] != NOT_ANSWERABLE
    flags = (pages == 1, pages != 1 and answerable, not answerable)
    return [name for name, member in zip(_MMLONGBENCH_PAGE_GROUPS, flags, strict=False) if member]


def mmlongbench_aggregate(records: Sequence[Record]) -> MMLongBenchSummary:
    """Accuracy, F1 and breakdowns of scored MMLongBench-Doc questions.

    Each record needs ``answer``, ``pred``, ``score``, ``evidence_pages``,
    ``evidence_sources`` and ``doc_type`` (list fields as lists or as their string form).
    """
    require_keys(
        records, ("answer", "pred", "score", "evidence_pages", "evidence_sources", "doc_type")
    )
    accuracy, f1 = _accuracy_and_f1(records)
    return MMLongBenchSummary(
        accuracy=accuracy,
        f1=f1,
        count=len(records),
        by_evidence_pages=grouped(records, _mmlongbench_page_groups, _MMLONGBENCH_PAGE_GROUPS),
        by_evidence_source=grouped(records, lambda r: list_field(r, "evidence_sources")),
        by_doc_type=grouped(records, lambda r: [r["doc_type"]]),
    )

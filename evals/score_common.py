"""Rules and aggregation helpers shared by the MMLongBench-Doc and LongDocURL scorers.

Both benchmarks' official scripts (see evals/score_mmlongbench.py and evals/score_longdocurl.py)
use the same Float, Str and exact-match rules; they are kept here once, as upstream states them:

- Float: the ground truth, gt/100 and gt*100 are each tried, first with ``math.isclose``
  (rel_tol 0.01), then by rounding both to max(min(d_pred, d_gt), 2) places, where d is the
  number of characters after the "." of ``str(x)`` (3 when there is none, and "5e-05" for
  1.5e-05, as upstream counts them).
- ANLS is 1 - Levenshtein / max(len(gt.upper()), len(pred.upper())) and is 0 when <= 0.5.
- URLs, code files, "page ...", numbers, times, dates and e-mails are compared exactly.

Departures, none of them on well-formed benchmark data: list literals are read with
:func:`ast.literal_eval` where upstream ``eval``s them, so expressions that only ``eval``
accepts (``[2+3]``, which upstream scores like ``[5]``) are not evaluated and score as
unparsable; an unknown answer format raises ``ValueError`` where upstream silently applies
the List rule.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ANLS_THRESHOLD = 0.5

_PARENTHESISED = re.compile(r"\s*\([^)]*\)")
_EDGE_QUOTE = re.compile(r"^['\"]|['\"]$")
_NUMBER_LIKE = re.compile(r"\b\d+(-\d+|\s\d+)?\b")  # phone numbers, "2015-2016", "9259"
_YEAR_MONTH_DAY = re.compile(r"\b\d{4}[-\s]\d{2}([-\s]\d{2})?\b")
_EMAIL = re.compile(r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}")


# --- answer rules -------------------------------------------------------------------------


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


def is_exact_match_type(text: str) -> bool:
    """Ground truths compared exactly: URLs, code files, "page ...", numbers, times, dates, e-mails."""
    return (
        "https://" in text
        or text.endswith((".py", "ipynb"))
        or text.startswith("page")
        or "a.m." in text
        or "p.m." in text
        or any(pattern.fullmatch(text) for pattern in (_NUMBER_LIKE, _YEAR_MONTH_DAY, _EMAIL))
    )


def to_float(text: str) -> float | None:
    try:
        return float(text)
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


def float_score(gt: str, pred: str) -> float:
    gt_value, pred_value = to_float(gt), to_float(pred)
    if gt_value is None or pred_value is None:
        return 0.0
    return float(_floats_match(gt_value, pred_value))


def string_score(gt: str, pred: str) -> float:
    if is_exact_match_type(gt):
        return float(gt == pred)
    return anls(gt, pred)


def strip_decorations(text: str, currencies: str) -> str:
    text = _PARENTHESISED.sub("", text).strip()
    text = _EDGE_QUOTE.sub("", text).strip()
    for symbol in currencies:
        text = text.lstrip(symbol).strip()
    return text.rstrip("%").strip()


def parse_literal(value: object) -> object:
    """Parse a string that starts with "[" (upstream ``eval``s it); other values pass through.

    Raises ``ValueError`` when the string is not a Python literal.
    """
    if not (isinstance(value, str) and value.startswith("[")):
        return value
    try:
        return ast.literal_eval(value)
    except (SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a Python literal: {value!r}") from exc


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else [value]


def check_format(answer_format: str, known: tuple[str, ...], benchmark: str) -> None:
    if answer_format not in known:
        raise ValueError(
            f"unknown {benchmark} answer format {answer_format!r}; expected one of {known}"
        )


# --- aggregates ---------------------------------------------------------------------------

Record = Mapping[str, Any]


@dataclass(frozen=True)
class GroupScore:
    """Mean score of a group of questions, and how many there are."""

    accuracy: float
    count: int


def require_keys(records: Sequence[Record], keys: tuple[str, ...]) -> None:
    for index, record in enumerate(records):
        missing = [key for key in keys if key not in record]
        if missing:
            raise ValueError(f"record {index} lacks {missing}; every record needs {list(keys)}")


def list_field(record: Record, key: str) -> list[Any]:
    """A list field, also in the string form of MMLongBench's ``samples.json`` ("[5, 6]")."""
    value = record[key]
    if value in (None, ""):
        return []
    if not isinstance(value, str):
        return list(value)
    try:
        parsed = ast.literal_eval(value)  # literal_eval never runs code
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"{key}={value!r} is not a list literal such as \"[5, 6]\"") from exc
    if not isinstance(parsed, list):
        raise ValueError(f"{key}={value!r} is not a list literal such as \"[5, 6]\"")
    return parsed


def grouped(
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

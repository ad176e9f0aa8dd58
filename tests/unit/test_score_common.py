"""Tests of evals/score_common.py: the rules both benchmark scorers share (garbage and unknown
formats), and helpers to read the aggregates' groups.
"""

from __future__ import annotations

import pytest

from docrefrag.evals.score_common import GroupScore
from docrefrag.evals.score_longdocurl import LONGDOCURL_FORMATS, longdocurl_score
from docrefrag.evals.score_mmlongbench import MMLONGBENCH_FORMATS, mmlongbench_score


def _accuracies(groups: dict[str, GroupScore]) -> dict[str, float]:
    return {key: group.accuracy for key, group in groups.items()}


def _counts(groups: dict[str, GroupScore]) -> dict[str, int]:
    return {key: group.count for key, group in groups.items()}


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

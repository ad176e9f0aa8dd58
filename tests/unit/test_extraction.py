"""Tests of evals/extraction.py: MMLongBench-Doc's answer extraction prompt, call and reply parsing."""

from __future__ import annotations

import pytest

from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.evals.extraction import EXTRACTION_PROMPT, extraction_messages, parse_extraction
from docrefrag.evals.score_mmlongbench import mmlongbench_score


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

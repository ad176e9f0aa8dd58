"""Answer extraction, MMLongBench-Doc's two-step protocol (github.com/mayubo2333/MMLongBench-Doc).

A chat model turns the system's free-form response into "Extracted answer: ... / Answer format:
...", and the extracted answer is what the benchmark scorers grade (evals/answers.py does this for
both benchmarks). Upstream sources: ``eval/prompt_for_answer_extraction.md``
(:data:`EXTRACTION_PROMPT`), ``eval/extract_answer.py`` (how the extractor is called:
:func:`extraction_messages`) and ``run_api.py`` / ``run_lvlm.py`` (how its reply is parsed:
:func:`parse_extraction`; a reply that cannot be parsed scores 0).
"""

from __future__ import annotations

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
    benchmark scorers do for a ``None`` prediction). The format is the first line after "Answer
    format:", ``None`` if absent; scoring uses the ground truth's format, not this one.
    """
    head, marker, tail = text.partition("Answer format:")
    parts = head.split("Extracted answer:")
    if len(parts) < 2:
        return None, None
    answer_format = tail.strip().splitlines()[0].strip() if marker and tail.strip() else None
    return parts[1].strip(), answer_format

"""Answer forms: which form a question asks for, the answer written in it, and numbers read across forms.

The official scorers are strict about form: MMLongBench-Doc scores an integer as `int(float(pred))`, so
"12,671" scores 0 against 12671, and a list must be a Python list literal. `answer_form` infers the
form from the question alone, as a user's `ask` has it (never from a benchmark's gold format), and
`format_answer` writes the answer in it: numbers without thousands separators, units or currency
where a number is asked for; lists as `['a', 'b']`; a one-item list as its item otherwise.

`number_values` reads the numbers of a text with the forms a page writes them in: "4,812", "4.812
thousand" (= 4812), "42%" / "42 percent" (= 42, and 0.42 as a fraction), and `lexical_support` (the
share of an answer's words and numbers a text states) uses it, so the validator and the citation find
an answer on a page that writes it another way.
"""

from __future__ import annotations

import ast
import re
from typing import Literal

from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.indexes.bm25 import tokenize

AnswerForm = Literal["integer", "number", "list", "string"]

_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9, "b": 1e9,
           "trillion": 1e12, "tn": 1e12}
NUMBER_WORDS = frozenset(("percent", "per", "cent", *_SCALES))  # words that belong to the number before them
_NUMBER = re.compile(
    r"(?<![\w.])[-+−]?[$€£¥]?\s?(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s?(%|percent\b|per cent\b|thousand\b|million\b|billion\b|trillion\b|mn\b|bn\b|tn\b|[kmb]\b))?",
    re.IGNORECASE)
_WORD_NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}

_LIST_Q = re.compile(r"^\s*(?:please\s+)?(?:list|name all|enumerate)\b|\b(?:what|which) (?:are|were)\b"
                     r"|\bwhich \w+s (?:are|were|have|had|did|do)\b|\blist (?:all|the)\b", re.IGNORECASE)
_INT_Q = re.compile(r"\bhow many\b|\b(?:the|total) number of\b|\b(?:what|which|in which|in what) year\b",
                    re.IGNORECASE)
_NUMBER_Q = re.compile(r"\b(?:what|which) (?:is|was|were|are)? ?(?:the )?(?:percentage|percent|proportion|share"
                       r"|ratio|rate|amount|total|average|value|sum|difference)\b|\bhow much\b|\bwhat percentage\b"
                       r"|\bby how (?:much|many)\b", re.IGNORECASE)

_WH = re.compile(r"\b(what|which|who|whom|whose|how|when|where|why)\b", re.IGNORECASE)
_QUANTITIES = frozenset(  # "which year", "which page", "which of": a number may answer them
    "year years page pages number numbers percentage percentages quarter quarters month months day days date dates "
    "age ages version versions figure figures table tables chapter chapters step steps rank ranks level levels grade "
    "grades decade decades century centuries edition editions season seasons slide slides section sections time times "
    "period periods hour hours round rounds phase phases stage stages week weeks unit units line lines route routes "
    "amount amounts value values score scores size sizes point points id ids of".split())
_NAME_AFTER_WHAT = re.compile(r"\s*(?:is|was|are|were)\s+the\s+(?:names?|titles?)\b", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"\s*[-+]?[$€£]?\s?[\d.,]*\d[\d.,]*\s?%?\s*")
_YES_NO = re.compile(r"\s*(?:yes|no)[.!]?\s*", re.IGNORECASE)
_LETTER = re.compile(r"\s*\(?([A-H])\)?[.):]?\s*", re.IGNORECASE)
_OPTION = re.compile(r"^[ \t]*\(?([A-H])\)?[.):][ \t]*([^\s.):].*)$", re.IGNORECASE | re.MULTILINE)


def answer_form(question: str) -> AnswerForm:
    """The form a question asks its answer in, from its words alone."""
    if _LIST_Q.search(question):
        return "list"
    if _INT_Q.search(question):
        return "integer"
    if _NUMBER_Q.search(question):
        return "number"
    return "string"


def asks_for_name(question: str) -> bool:
    """Whether a question asks for a name rather than a quantity: its interrogative word (the first wh-word
    that opens the question or a clause after a comma, or ends it: not "people who", "the year in which") is
    who, whom or whose, which before a word that is no quantity ("which method", not "which year"), or "what
    is the name/title"."""
    for match in _WH.finditer(question):
        before, after = question[:match.start()].rstrip(), question[match.end():]
        if not before or before[-1] in ",;:." or after.strip() == "?":
            break
    else:
        return False
    word, rest = match.group(1).lower(), after.split()
    if word in ("who", "whom", "whose"):
        return True
    if word == "which":
        return bool(rest) and re.sub(r"\W", "", rest[0].lower()) not in _QUANTITIES
    return word == "what" and bool(_NAME_AFTER_WHAT.match(after))


def miscast(question: str, answer: str) -> bool:
    """Whether `answer` is a bare number where the question asks for a name ("75" for "Which method ...?"):
    what a small model writes when it copies a reference marker or a table's figure instead of the row's
    name. No question of the dev sets that asks for a name has a bare number for its answer (48 on
    MMLongBench-Doc, 3 on LongDocURL, 12 on a stated-facts seed: docs/decisions/answers.md)."""
    return bool(_BARE_NUMBER.fullmatch(answer)) and asks_for_name(question)


def stated_claim(question: str, answer: str) -> str | None:
    """What a page must state for `answer` to hold, or None where no words of a page can: the answer itself;
    for the letter of an option the question lists, one option a line ("(A). 100, 50, 25" ... "Choose the
    letter"), that option's text; for a bare yes or no, None (it affirms or denies the question; only a judge
    can weigh it)."""
    if _YES_NO.fullmatch(answer):
        return None
    letter = _LETTER.fullmatch(answer)
    options = {m.group(1).upper(): m.group(2) for m in _OPTION.finditer(question)} if letter else {}
    return options.get(letter.group(1).upper(), answer) if len(options) >= 2 else answer


def written_numbers(text: str) -> list[set[float]]:
    """Each number written in `text`, as every value it may stand for: as written, times its scale word
    ("4.8 million" -> 4.8 and 4,800,000), and a percentage also as a fraction ("42%" -> 42 and 0.42)."""
    numbers = []
    for m in _NUMBER.finditer(text):
        value = float(m.group(1).replace(",", ""))
        if m.group(0).lstrip().startswith(("-", "−")):
            value = -value
        values = {_rounded(value)}
        unit = (m.group(2) or "").lower()
        if unit in ("%", "percent", "per cent"):
            values.add(_rounded(value / 100))
        elif unit in _SCALES:
            values.add(_rounded(value * _SCALES[unit]))
        numbers.append(values)
    return numbers


def cell_number(text: str) -> float | None:
    """The value of a text that is one number and nothing else ("4,812", "-3.5", "12%", "$4.5"), as written."""
    m = _NUMBER.fullmatch(text.strip())
    if m is None or (m.group(2) or "%") != "%":
        return None
    value = float(m.group(1).replace(",", ""))
    return -value if m.group(0).startswith(("-", "−")) else value


def number_values(text: str) -> set[float]:
    """Every value a number of `text` may stand for (see `written_numbers`)."""
    return set().union(*written_numbers(text))


def lexical_support(answer: str, evidence: str) -> float:
    """The share of the answer's words and numbers that `evidence` states (numbers in any form)."""
    words = {w for w in tokenize(answer)  # numbers, with their scale or percent, are matched as values
             if not any(c.isdigit() for c in w) and w not in NUMBER_WORDS}
    numbers = written_numbers(answer)
    if not words and not numbers:
        return 0.0
    on_pages = number_values(evidence)
    found = len(words & set(tokenize(evidence))) + sum(bool(values & on_pages) for values in numbers)
    return found / (len(words) + len(numbers))


def _rounded(value: float) -> float:
    return round(value, 9)


def format_answer(question: str, answer: str) -> str:
    """The answer written in the form the question asks for (see the module docstring)."""
    answer = answer.strip()
    if answer == NOT_ANSWERABLE or not answer:
        return answer
    form = answer_form(question)
    items = _list_items(answer)
    if form == "list":
        return repr([_plain_number(i) for i in items]) if len(items) > 1 else _plain_number(items[0])
    if len(items) == 1:
        answer = items[0]
    if form in ("integer", "number"):
        number = _the_number(answer)
        if number is not None:
            return number
    return _plain_number(answer)


def _list_items(answer: str) -> list[str]:
    """The items of an answer written as a list literal, or joined by commas, semicolons or "and"."""
    if answer.startswith("[") and answer.endswith("]"):
        try:
            value = ast.literal_eval(answer)
        except (SyntaxError, ValueError):
            value = None
        if isinstance(value, list | tuple) and value:
            return [str(v).strip() for v in value]
        answer = answer[1:-1]
    if re.fullmatch(r"[-+$€£]?\d{1,3}(?:,\d{3})+(?:\.\d+)?%?", answer):  # one number with separators
        return [answer]
    parts = [p.strip(" '\"") for p in re.split(r"\s*;\s*|,\s*(?:and\s+)?|\s+and\s+", answer)]
    parts = [p for p in parts if p]
    return parts or [answer]


def _the_number(answer: str) -> str | None:
    """The answer's one number as digits alone ("12,671 people" -> "12671", "$4.5m" -> "4.5", "two" -> "2");
    None when the answer holds no number or several."""
    found = [m.group(1).replace(",", "") for m in _NUMBER.finditer(answer)]
    if len(found) != 1:
        word = answer.lower().strip(" .")
        return str(_WORD_NUMBERS[word]) if word in _WORD_NUMBERS else None
    number = found[0]
    if re.match(r"\s*[-−]", answer):
        number = f"-{number}"
    return number


def _plain_number(text: str) -> str:
    """A text that is one number with thousands separators, written without them ("12,671" -> "12671")."""
    if re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?%?", text.strip()):
        return text.strip().replace(",", "")
    return text

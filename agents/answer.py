"""The answer agent: read the top pages, answer briefly, cite page and region.

Two readers: a chat model over the pages' text, one page at a time in rank order until a page yields
an answer that the page's passages on the question, read alone, also yield (`answer_question`, the
default), and the Doc-REFRAG reader (`read_with_reader`), which reads
the pages' stored tokens as compressed chunks with the question's chunks expanded into the decoder's own
tokens of their regions' words, and cites the expanded chunk that holds most of the answer's words.

Reading is query-focused: each table row is written with its cells' column names, the cell at a row
and a column the question names is said on its own line, and for a question after the highest or the
lowest, the named columns' extremes are said in words (`table_view`: a small model misreads "the 2019
column" and "the lowest of four values"); a numbered list is read as its item of the rank a question asks
for ("Third step of the ...: ...", `ranked_items`); bulleted items indented by a few spaces are written at
the margin, one list level (`even_bullets`); a page that fits the per-page budget
is read whole, a longer one is cut to its passages (sentences, table rows, list items) that share
the most of the question's rarer terms (`focused`), kept in page order. The answer is written in
the form the question asks for (agents/forms.py), then located on the pages read: the citation is
the page element (paragraph, table, list, caption: the evidence graph's regions) that states most of
the answer's words and numbers (in any form).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from docrefrag.agents import prompts
from docrefrag.agents.endpoint import invoke_llm
from docrefrag.agents.forms import cell_number, format_answer, lexical_support, miscast, stated_claim
from docrefrag.agents.llm import is_local_model
from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.agents.schemas import Citation, Claim
from docrefrag.core.chunking import box_overlap, chunk_box
from docrefrag.indexes.bm25 import tokenize
from docrefrag.indexes.page_table import ChunkRecord
from docrefrag.indexes.store import Store

logger = logging.getLogger(__name__)

# abstentions written otherwise; scored as answers they lose ANLS points and count as answered in F1
_ABSTENTIONS = {"not answerable", "unanswerable", "not answerable from the document", "cannot be answered",
                "the answer is not in the document", "not mentioned", "not found", "unknown", ""}


SHORT_WORDS = 3
SECOND_READING_CHARS = 1000  # a longer page is also read as its passages on the question, this long
_ABBREVIATIONS = frozenset("inc ltd co corp plc jr sr st etc vs no dept".split())  # their full stop is part of the word
_ENUMERATION = re.compile(r"^(?:[-*\u2022]|\d{1,2}[.)])\s+(?=\S)")
_LEAD_IN = re.compile(r"^(?:the\s+)?(?:short\s+)?answer(?:\s+is\b\s*:?|\s*:)\s*", re.I)


@dataclass
class PageText:
    doc_id: str
    page: int
    text: str
    chunks: list[ChunkRecord]
    outline: bool = False  # the document's headings (`outline_page`), not one page: its chunks lie on many


def page_texts(store: Store, pages: Sequence[tuple[str, int]], question: str, chars_per_page: int) -> list[PageText]:
    """The text of each (doc_id, page) as the answer agent reads it (see the module docstring)."""
    out = []
    for doc_id, page in pages:
        text = ranked_items(table_view(even_bullets(store.pages.markdown(doc_id, page)), question), question)
        if len(text) > chars_per_page:
            text = focused(text, question, chars_per_page)
        out.append(PageText(doc_id, page, text, store.pages.regions(doc_id, page)))
    return out


_SECTION_Q = re.compile(r"\b(?:which|what)\s+(?:sections?|chapters?|headings?)\b(?!\s+\d)|\bselect titles\b"
                        r"|\bsection best matches\b", re.IGNORECASE)


def asks_for_section(question: str) -> bool:
    """Whether the question asks which section (chapter, heading, title) of the document holds something."""
    return bool(_SECTION_Q.search(question))


def outline_page(store: Store, doc_id: str, question: str, chars: int) -> PageText | None:
    """The document's outline as one text to read: its headings (those with words, each text once: not a
    running header on every page) in reading order, one a line, each a citable chunk on its own page; past
    `chars`, the headings that share the most of the question's terms (`focused`). None for a document
    without headings, or for a scan (most pages read by OCR), whose layout makes headings of glossary entries
    and table labels: on LongDocURL's scanned 10-Q its outline turned 0.72 of 4 section questions into 0
    (docs/decisions/answers.md)."""
    info = store.catalog.find(doc_id)
    if info is None or 2 * info.ocr_pages > info.n_pages:
        return None
    graph = store.graphs.get(doc_id)
    first = {}
    for node in graph.headings():
        h = graph.nodes[node]
        if len(re.findall(r"[^\W\d_]", h.text)) >= 3:  # words, not "2020" nor "01.16 03.16"
            first.setdefault(h.text, ChunkRecord(doc_id, h.page, h.index, h.text, h.bbox))
    text = "\n".join(f"# {t}" for t in first)
    if len(text) > chars:
        kept = {line.removeprefix("... ") for line in focused(text, question, chars).splitlines()}
        first = {t: c for t, c in first.items() if f"# {t}" in kept}
        text = "\n".join(f"# {t}" for t in first)
    chunks = list(first.values())
    return PageText(doc_id, chunks[0].page, text, chunks, outline=True) if chunks else None


def focused(text: str, question: str, chars: int) -> str:
    """The passages of a page (sentences, table rows, headings) that share the most of the question's
    terms, each term weighted by how few passages of the page hold it, up to `chars` characters; kept in
    page order, with " ... " where passages were left out."""
    passages = page_passages(text)
    terms = set(tokenize(question))
    held = [terms & set(tokenize(p)) for p in passages]
    spread = {t: sum(t in h for h in held) for t in terms}
    scores = [sum(1 / spread[t] for t in h) for h in held]
    kept, size = set(), 0
    for i in sorted(range(len(passages)), key=lambda i: (-scores[i], i)):
        if size + len(passages[i]) + 1 <= chars:
            kept.add(i)
            size += len(passages[i]) + 1
    out, last = [], -1
    for i in sorted(kept):
        out.append(("" if i == last + 1 else "... ") + passages[i])
        last = i
    return "\n".join(out) or text[:chars]


def page_passages(text: str) -> list[str]:
    """A page's sentences (a paragraph's wrapped lines joined first), table rows and headings."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        prose: list[str] = []
        for line in lines:
            if line.startswith(("#", "|", "- ", "* ")) or " | " in line or re.match(r"\d{1,2}[.)] ", line):
                out += _sentences(" ".join(prose)) + [line]  # a heading, a table row, a list item: one passage
                prose = []
            else:
                prose.append(line)
        out += _sentences(" ".join(prose))
    return out


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"(])", text) if s.strip()]


_INDENTED_BULLET = re.compile(r"(?m)^ {1,3}([-*+] )")


def even_bullets(markdown: str) -> str:
    """Bulleted items indented by one to three spaces written at the margin, as markdown reads them (one
    level). The text layer indents the items of one list by 1-3 spaces at random, and the small model
    left out an item indented by two among items indented by one ("  - Uruguay" before " - Romania")."""
    return _INDENTED_BULLET.sub(r"\1", markdown)


def table_view(markdown: str, question: str = "") -> str:
    """The markdown with each table's rows written as "row | column: value | ...", the header's names
    repeated at every cell, then the cells the question points at and, for a question that asks for the
    highest or lowest, its columns' extremes (`_table_rows`); other lines as they are."""
    out: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        if not _is_table_row(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and _is_table_row(lines[j]):
            j += 1
        out += _table_rows([_cells(line) for line in lines[i:j]], question)
        i = j
    return "\n".join(out)


def _is_table_row(line: str) -> bool:
    return line.lstrip().startswith("|") and line.rstrip().endswith("|") and line.count("|") >= 3


def _cells(line: str) -> list[str]:
    return [" ".join(c.replace("<br>", " ").split()) for c in line.strip().strip("|").split("|")]


def _table_rows(rows: list[list[str]], question: str) -> list[str]:
    """The cells at a row and a column the question names ("Cormere, 2019: 62,872."), first; then the
    table's rows (header, separator, data) as labelled lines; then, if the question asks for a highest
    or lowest, each numeric column's highest and lowest row, worded as a question asks for them, of the
    columns the question names (all numeric columns if it names none). A small model misreads "the
    2019 column" and "the lowest of four values"; it reads these lines. Said after the rows, the named
    cell lost to a cell of the rows (the next year's, a row above's) on 2 of 6 generated table questions."""
    is_rule = [all(re.fullmatch(r":?-{3,}:?", c) for c in r if c) and any(r) for r in rows]
    if len(rows) < 3 or not is_rule[1]:  # no header: the rows' cells as they are
        return [" | ".join(c for c in r if c) for r, rule in zip(rows, is_rule, strict=True) if not rule]
    header, data = rows[0], [r + [""] * (len(rows[0]) - len(r)) for r in rows[2:]]
    out = []
    for row in data:
        names = header + [""] * (len(row) - len(header))  # a row longer than the header: unnamed cells
        parts = [f"{name}: {value}" if name else value for name, value in zip(names[1:], row[1:], strict=True) if value]
        out.append(" | ".join([row[0], *parts]) if row[0] else " | ".join(parts))
    terms = set(tokenize(question))
    named_columns = _named_columns(header, terms)
    named_rows = [r for r in data if r[0] and terms & set(tokenize(r[0]))]
    out = [f"{r[0]}, {header[k]}: {r[k]}." for r in named_rows for k in named_columns if r[k]] + out
    if _SUPERLATIVE.search(question):
        out += [line for k in (named_columns or range(1, len(header))) if (line := _extremes(header[k], data, k))]
    return out


_SUPERLATIVE = re.compile(r"\b(?:highest|lowest|largest|smallest|greatest|biggest|fewest|most|least|maximum|minimum"
                          r"|top|bottom|best|worst|leading)\b", re.IGNORECASE)


def _named_columns(header: list[str], terms: set[str]) -> list[int]:
    """The columns (past the first, the rows' labels) the question names: of those sharing a word with it
    that is not a number (a table's year is often every column's), the ones whose name it states most
    fully, by the share of the name's words it holds ("operating margin" names "Margin (%)" fully and
    "Operating costs 2025 (EUR thousand)" in part); else those sharing a number."""
    shared = {k: terms & set(tokenize(header[k])) for k in range(1, len(header))}
    worded = {k: len(words) / len(set(tokenize(header[k]))) for k, words in shared.items()
              if any(not w.isdigit() for w in words)}
    if not worded:
        return [k for k, words in shared.items() if words]
    best = max(worded.values())
    return [k for k, share in worded.items() if share == best]


def _extremes(name: str, data: list[list[str]], k: int) -> str:
    """ "Highest X: row (value). Lowest X: row (value)." for column k of at least 3 labelled numbers that
    are not all equal; "" otherwise."""
    values = [(cell_number(r[k]), r[0], r[k]) for r in data]
    if not name or len(values) < 3 or not all(v is not None and label for v, label, _ in values):
        return ""
    high, low = max(values), min(values)
    return "" if high[0] == low[0] else f"Highest {name}: {high[1]} ({high[2]}). Lowest {name}: {low[1]} ({low[2]})."


_ORDINALS = "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split()
_RANK_Q = re.compile(rf"\b({'|'.join(_ORDINALS)}|\d{{1,2}}(?:st|nd|rd|th))\s+(\w+)", re.IGNORECASE)
_NUMBERED_ITEM = re.compile(r"^\s*(\d{1,2})[.)]\s+(\S.*)$")


def ranked_items(markdown: str, question: str) -> str:
    """Where the question asks for an item by its rank ("the third step"), each numbered list that has an
    item of that rank written as that item alone, with the rank, the question's noun and the list's
    lead-in ("Third step of the supplier onboarding procedure: Agree the delivery schedule."): given the
    list, a small model asked for the third step answers "3" from "3. Agree ...", or another item."""
    asked = _RANK_Q.search(question)
    if not asked:
        return markdown
    word = asked.group(1).lower()
    rank = _ORDINALS.index(word) + 1 if word in _ORDINALS else int(word[:-2])
    out: list[str] = []
    lead, items, held = "", {}, []  # the list being read: its items by number, its lines as written

    def the_list() -> list[str]:
        if rank not in items:
            return held
        of = f" of the {lead.strip('#: ').lower()}" if lead else ""
        return [f"{_ORDINALS[rank - 1].capitalize()} {asked.group(2).lower()}{of}: {items[rank]}", ""]

    for line in markdown.splitlines():
        item = _NUMBERED_ITEM.match(line)
        if item or (items and not line.strip()):
            if item:
                items[int(item.group(1))] = item.group(2).strip()
            held.append(line)
            continue
        if items:  # the list ended
            out += the_list()
            items, held = {}, []
        if line.strip():
            lead = line.strip() if line.rstrip().endswith(":") or line.startswith("#") else ""
        out.append(line)
    return "\n".join(out + the_list())


def answer_messages(question: str, pages: list[PageText], answer: str | None = None) -> list[BaseMessage]:
    """The answer agent's prompt over `pages`; with an `answer`, the validator's judge prompt, which
    repeats it word for word before asking whether the pages state that answer."""
    context = "\n\n".join(f"[{'Outline' if p.outline else f'Page {p.page}'}]\n{p.text}" for p in pages)
    user = (prompts.ANSWER_USER.format(pages=context, question=question) if answer is None
            else prompts.VALIDATE.format(pages=context, question=question, answer=answer))
    return [SystemMessage(prompts.ANSWER_SYSTEM), HumanMessage(user)]


def answer_question(question: str, prompts_pages: list[list[PageText]],
                    llm: BaseChatModel) -> tuple[str, int, list[list[PageText]]]:
    """(short answer, output tokens, the prompts read): each prompt's pages (`prompts_pages`: one page per
    prompt in the default pages mode, every gathered element in one prompt in the evidence-graph mode) read
    in order until one yields an answer that is no abstention and no echo of the question; a page longer
    than SECOND_READING_CHARS yields one only if its passages on the question, read alone first, yield one
    too (`question_passages`, `settle`). The answer was read from the last prompt read. A small model reads
    one page better than three: given three, it takes a row of another page's table, the lowest of the
    wrong column, or a neighbouring role's holder for a role no page names; and most answers are on the
    first page, which is then the only prefill."""
    tokens = 0
    for i, pages in enumerate(prompts_pages):
        passages = question_passages(question, pages)
        cut, used = _reply(question, passages, llm) if passages else (None, 0)
        tokens += used
        if cut is not None and not answered(question, cut):
            continue  # the question's own passages hold no answer: neither does the page
        answer, used = _reply(question, pages, llm)
        tokens += used
        if answered(question, answer):
            return settle(question, pages, answer, cut, llm), tokens, prompts_pages[:i + 1]
    return NOT_ANSWERABLE, tokens, prompts_pages


def _reply(question: str, pages: list[PageText], llm: BaseChatModel) -> tuple[str, int]:
    """(short answer, output tokens) of the answer prompt over `pages`."""
    reply = invoke_llm(llm, answer_messages(question, pages), stop=["\n"])
    text = str(reply.content).strip()
    tokens = int((getattr(reply, "usage_metadata", None) or {}).get("output_tokens", 0))
    return final_answer(question, text.splitlines()[0] if text else ""), tokens


def answered(question: str, answer: str) -> bool:
    """Whether a page's `answer` answers: no abstention, no echo of the question, no bare number for a name."""
    return not is_unanswerable(answer) and not echoes(question, answer) and not miscast(question, answer)


def question_passages(question: str, pages: list[PageText]) -> list[PageText]:
    """A page longer than SECOND_READING_CHARS as its passages that share the most of the question's rarer
    terms, that many characters at most (`focused`); nothing for a shorter page or a prompt of several. A
    small model distracted by the rest of a page gives a name the page states for another role ("X served
    as chief executive officer" for "Who is the chief data officer?") or the former holder stated first,
    and reads the question's own passages right. Measured in docs/decisions/answers.md."""
    if len(pages) != 1 or len(pages[0].text) <= SECOND_READING_CHARS:
        return []
    return [replace(pages[0], text=focused(pages[0].text, question, SECOND_READING_CHARS))]


def settle(question: str, pages: list[PageText], answer: str, cut: str | None, llm: BaseChatModel) -> str:
    """The page's answer where the whole page gave `answer` and its question passages `cut` (None: not read):
    where they differ, the validator's judge (a local model's P("Yes") that the whole page states it) picks,
    a tie keeping the whole page's, which holds the context of a table's cells and of a list's items that
    the cut reading loses; a model without P("Yes") keeps the whole page's."""
    if cut is None or cut == answer or not is_local_model(llm):
        return answer
    whole, other = (llm.yes_probabilities([answer_messages(question, pages, a)])[0] for a in (answer, cut))
    return cut if other > whole else answer


_CHOICE = re.compile(r"\bor\b|\bwhether\b", re.IGNORECASE)


def echoes(question: str, answer: str) -> bool:
    """Whether an answer only repeats the question's own words ("Norworth Group" for "Who is the chief data
    officer of Norworth Group?"): what a small model writes when the page does not hold the answer. A
    question that offers a choice ("A or B?", options to pick by letter) is answered with its own words, so it
    has no echo, nor does one that asks for a section, whose heading may repeat it ("RISKS" for "Which sections
    discuss the risks ...?")."""
    words = set(tokenize(answer))
    return (bool(words) and words <= set(tokenize(question)) and not _CHOICE.search(question)
            and stated_claim(question, answer) == answer and not asks_for_section(question))


def read_with_reader(question: str, pages: list[PageText], store: Store, reader) -> tuple[str, int, list[PageText]]:
    """(short answer, output tokens, the pages' text chunks that lie in an expanded grid chunk, each
    carrying that grid chunk's box) from the Doc-REFRAG reader over the pages' stored tokens: the
    expanded chunks become the region citations."""
    tokens = store.pages.stacked_tokens([(p.doc_id, p.page) for p in pages])
    grid, k = math.isqrt(tokens.shape[1]), reader.config.k
    records = [store.pages.get(p.doc_id, p.page) for p in pages]
    regions = reader.page_regions(records, grid)
    out = reader.answer(question, torch.from_numpy(tokens), regions=regions)
    cited = []
    for i, (p, record) in enumerate(zip(pages, records, strict=True)):
        boxes = [chunk_box(j, k, grid, record.width, record.height) for page, j in out.expanded if page == i]
        chunks = []
        for c in p.chunks:
            cover, box = max(((box_overlap(b, c.bbox), b) for b in boxes), default=(0.0, None))
            if cover > 0:
                chunks.append(ChunkRecord(c.doc_id, c.page, c.chunk, c.text, box))
        if chunks:
            cited.append(PageText(p.doc_id, p.page, p.text, chunks))
    return final_answer(question, out.text), out.output_tokens, cited


RUN = 8  # consecutive elements a citation may join: a list's items are elements of their own


def cite(answer: str, pages: list[PageText], question: str = "") -> list[Claim]:
    """One claim (the answer) cited by the region of the pages read that states most of its words and
    numbers (numbers in any form: 4812 is found in "4,812"; of the option's text for an option's letter, of
    the question's for a yes or a no): a page element (paragraph, table, list item,
    caption) or, where no one element states all of it, up to RUN consecutive ones (a list's items) in
    one box. Among equals, the one on the page read first (the best ranked), then the fewest elements,
    then the one sharing most of the question's terms, then the smallest."""
    if is_unanswerable(answer) or not pages:
        return []
    terms = set(tokenize(question))
    claim = stated_claim(question, answer)  # an option's text for its letter; a yes or a no: what the question asks
    wanted = question if claim is None else claim
    best: tuple[tuple[float, int, int, int, float], PageText, ChunkRecord | None] = (
        (0.0, 0, 0, 0, 0.0), pages[0], None)
    for rank, p in enumerate(pages):
        for i in range(len(p.chunks)):
            for run in (p.chunks[i:j] for j in range(i + 1, min(i + RUN, len(p.chunks)) + 1)):
                if run[-1].page != run[0].page:  # an outline's headings: one box is on one page
                    break
                text = "\n".join(c.text for c in run)
                x0, y0 = min(c.bbox[0] for c in run), min(c.bbox[1] for c in run)
                x1, y1 = max(c.bbox[2] for c in run), max(c.bbox[3] for c in run)
                support = lexical_support(wanted, text)
                key = (support, -rank, -len(run), len(terms & set(tokenize(text))), -(x1 - x0) * (y1 - y0))
                if key > best[0]:
                    best = (key, p, ChunkRecord(run[0].doc_id, run[0].page, run[0].chunk, text, (x0, y0, x1, y1)))
                if support == 1.0:  # a longer run from here states no more
                    break
    (support, *_), page, chunk = best
    if support <= 0:  # no region states the answer (computed, or written differently): the page, no region
        page, chunk = next((p for p in pages if not p.outline), pages[0]), None
    citation = Citation(doc_id=page.doc_id, page=chunk.page if chunk else page.page, bbox=chunk.bbox if chunk else None,
                        snippet=chunk.text[:300] if chunk else page.text[:300])
    return [Claim(text=answer, citations=[citation])]


def final_answer(question: str, reply: str) -> str:
    """The answer of a one-line reply: lead-in, restated question and abstention phrasing settled, in the
    question's form."""
    return format_answer(question, canonical(short_answer(unrestated(question, reply))))


_RESTATED = re.compile(r"^(?P<lead>.{3,200}?)\s+(?:is|are|was|were)\s+(?P<rest>\S.*)$", re.IGNORECASE | re.DOTALL)


def unrestated(question: str, reply: str) -> str:
    """The reply's first sentence after a restatement of the question, which a decoder not told to be brief
    writes ("The CAGR of television from 2012 to 2016 is 14.3%. It grew..." -> "14.3%."): where every word
    before the reply's first is/are/was/were (stopwords aside, two at least) is a word of the question.
    Otherwise the reply as written ("Paris is the capital" names no word of "What is the capital of France?"
    first)."""
    match = _RESTATED.match(reply.strip())
    if not match:
        return reply
    lead = tokenize(match["lead"])
    if len(lead) < 2 or not set(lead) <= set(tokenize(question)):
        return reply
    return re.split(r"(?<=[.!?])\s+", match["rest"].strip(), maxsplit=1)[0]


def short_answer(reply: str) -> str:
    """The answer in a one-line reply, without the lead-in small models write ("Answer:", "The short
    answer is 1.", "The answer is: 22") and without the full stop after a short answer (a number or
    up to SHORT_WORDS words, not ending in an abbreviation; a sentence keeps it): the official scorers
    compare numbers exactly, so "300." would not match 300. An abstention is recognised before the
    lead-in goes ("The answer is not in the document."); a lead-in alone is kept as written."""
    reply = reply.strip()
    if canonical(reply) == NOT_ANSWERABLE:
        return NOT_ANSWERABLE
    answer = _LEAD_IN.sub("", reply).strip().strip('"').strip() or reply
    answer = _ENUMERATION.sub("", answer) or answer  # a list's marker copied with its item: "3. Sign the contract."
    last = answer.split()[-1].lower() if answer.split() else ""
    if (answer.endswith(".") and len(answer.split()) <= SHORT_WORDS and not re.search(r"\.\s", answer)
            and ("." not in last[:-1] or re.fullmatch(r"[\d.,%]+", last[:-1])) and last[:-1] not in _ABBREVIATIONS):
        answer = answer[:-1].rstrip().strip('"')
    return answer


def canonical(answer: str) -> str:
    """The answer, with every abstention phrasing written as the benchmarks' "Not answerable"."""
    return NOT_ANSWERABLE if answer.strip().lower().rstrip(".!") in _ABSTENTIONS else answer.strip()


def is_unanswerable(answer: str) -> bool:
    """An abstention, or "None" (which may also be a real answer, so canonical() leaves it as written)."""
    return canonical(answer) == NOT_ANSWERABLE or answer.strip().lower().rstrip(".!") == "none"

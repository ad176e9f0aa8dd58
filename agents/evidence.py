"""The evidence controller (MAGE-RAG): a budgeted best-first walk of the evidence graph from the top pages.

Instead of whole pages, the answerer reads the elements (paragraphs, headings, tables, captions) that
`gather` opens: it activates the elements of the fused top pages, opens the best-scored candidate that fits
the tokens left and expands it along its edges (next, adjacent, caption, similar; a heading: its section's
children), until a budget runs out (tokens of the opened text by `count_tokens`, steps: each open and each
expand, wall-clock seconds) or no candidate is left. A candidate's score is the cosine of the query vector
with the element's embedding (the dense branch's space) plus LEXICAL times the share of the question's
content words in its text. A caption edge lifts its far end to the opened element's score, so a table or
figure pulls in its caption next and a caption its figure; a figure without words is opened only that way.
After each open, candidates below PRUNE times the best opened score are dropped. An element too big for
the tokens left is dropped, unless it is bigger than the whole budget: it is then opened cut to the tokens
left (so one long table is not lost to a small budget). Same inputs, same moves (ties: the lower node id).

With a `choose` function (`chat_chooser`: AskConfig.evidence_budgets.evidence_driver="llm") a chat model picks
which of the CHOICES best-scored candidates to open next, or ends the walk; the budgets bind as before.

Departures from MAGE-RAG: the evidence is text (each element's words; no region crops for a vision
model), the moves follow this fixed score unless a chat model picks among the best few, and there is no
search move: a question the walk cannot answer is searched again by the ask graph's refine round.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from docrefrag.agents import prompts
from docrefrag.agents.answer import PageText
from docrefrag.agents.endpoint import invoke_llm
from docrefrag.indexes.bm25 import tokenize
from docrefrag.indexes.elements import Element
from docrefrag.indexes.page_table import ChunkRecord
from docrefrag.indexes.store import Store

LEXICAL = 1.0  # weight of the lexical share beside the cosine (both about 0..1 on a relevant element)
PRUNE = 0.5  # candidates scoring below this fraction of the best opened score leave the frontier
EDGES = ("caption", "next", "adjacent", "similar")  # in this order: a caption edge's lift comes first
CHOICES = 4  # the best-scored candidates a `choose` function picks from
PREVIEW = 40  # tokens of each candidate's text a chat model sees
_TOKEN = re.compile(r"\w+|[^\w\s]")

Key = tuple[str, int, int]  # (doc_id, page, element)
# (question, the candidates best-scored first as (key, element, score), elements opened so far) -> the index
# of the candidate to open next, or None to end the walk
Chooser = Callable[[str, list[tuple[Key, Element, float]], int], int | None]


def count_tokens(text: str) -> int:
    """The reader budgets' token count: runs of word characters and single punctuation marks. An estimate,
    not the decoder's tokenizer (which splits rare words further), the same for every pipeline compared."""
    return len(_TOKEN.findall(text))


def _cut(text: str, tokens: int) -> str:
    """`text` up to the end of its `tokens`-th token."""
    ends = [m.end() for m in _TOKEN.finditer(text)]
    if tokens >= len(ends):
        return text
    return text[:ends[tokens - 1]] if tokens > 0 else ""


@dataclass(frozen=True)
class Budgets:
    tokens: int
    steps: int
    seconds: float


@dataclass(frozen=True)
class Move:
    step: int  # the steps (opens and expands) taken when it was made; an open or expand carries its own
    action: str  # "activate" (scored into the frontier, or lifted there by a caption edge), "open" (its text
    # added), "expand" (its edges followed), "prune" (left the frontier unopened), "stop" (the budget or
    # the empty frontier that ended the walk; node: the first page's document root)
    node: Key
    edge: str | None  # the edge kind that activated it (None for a seed and for the other actions)
    score: float
    tokens: int  # the evidence's tokens after the move


@dataclass
class Evidence:
    elements: list[Key]  # opened, in document reading order
    pages: list[PageText]  # per page, the opened elements' text in reading order; chunk = element index
    tokens: int
    steps: int
    seconds: float
    moves: list[Move]
    stopped: str  # "tokens", "steps", "seconds", "exhausted" or "driver" (the `choose` function ended it)


def chat_chooser(llm: BaseChatModel) -> Chooser:
    """A `choose` function asking `llm` (prompts.EVIDENCE_CHOICE: the question, each candidate's page, kind
    and first PREVIEW tokens) for a candidate's number, or 0 to stop. A reply naming no candidate opens the
    best-scored one, and so does 0 before anything was opened (the answerer needs something to read)."""

    def choose(question: str, candidates: list[tuple[Key, Element, float]], read: int) -> int | None:
        listing = "\n".join(f"{i}. [page {key[1]}, {e.kind}] {_cut(e.text, PREVIEW) or '(a figure without words)'}"
                            for i, (key, e, _) in enumerate(candidates, 1))
        reply = invoke_llm(llm, [HumanMessage(prompts.EVIDENCE_CHOICE.format(
            question=question, read=read, candidates=listing))], stop=["\n"])
        number = re.search(r"\d+", str(reply.content))
        pick = int(number.group()) if number else 1
        if pick == 0:
            return None if read else 0
        return pick - 1 if pick <= len(candidates) else 0

    return choose


def gather(store: Store, question: str, query_vector: np.ndarray, pages: list[tuple[str, int]],
           budgets: Budgets, choose: Chooser | None = None) -> Evidence:
    """The evidence for `question` from the (doc_id, page) `pages` and the graph around them (module docstring);
    `choose`: picks each element to open among the CHOICES best-scored (None: the best-scored)."""
    start = time.monotonic()
    terms = set(tokenize(question))
    query = np.asarray(query_vector, np.float32)
    docs = list(dict.fromkeys(doc for doc, _ in pages))
    graphs = {doc: store.graphs.get(doc) for doc in docs}
    scored: dict[Key, float] = {}
    scores: dict[Key, float] = {}  # the frontier's candidates (a heap entry whose score differs is stale)
    heap: list[tuple[float, Key]] = []
    opened: dict[Key, str] = {}
    dropped: set[Key] = set()  # pruned: not scored again, unless a caption edge lifts it
    moves: list[Move] = []
    tokens = steps = 0
    best = None  # the best opened score
    too_big = False  # a candidate was dropped for the tokens left

    def element(key: Key) -> Element:
        return graphs[key[0]].nodes[key[1:]]

    def score(key: Key) -> float:
        if key not in scored:
            vector = graphs[key[0]].vectors.get(key[1:])
            cosine = float(query @ vector) if vector is not None else 0.0
            share = len(terms & set(tokenize(element(key).text))) / len(terms) if terms else 0.0
            scored[key] = round(cosine + LEXICAL * share, 6)
        return scored[key]

    def activate(key: Key, edge: str | None, lift: float | None = None) -> None:
        e = element(key)
        if (key in opened or e.kind in ("page", "document") or (key in dropped and lift is None)
                or (not e.text.strip() and edge != "caption")):
            return
        value = max(score(key), lift) if lift is not None else score(key)
        if key in scores and scores[key] >= value:
            return
        if best is not None and value < PRUNE * best:
            dropped.add(key)
            moves.append(Move(steps, "prune", key, edge, value, tokens))
            return
        scores[key] = value
        heapq.heappush(heap, (-value, key))
        moves.append(Move(steps, "activate", key, edge, value, tokens))

    for doc, page in pages:
        for node, _, _ in graphs[doc].neighbours((page, 0), ("contains",)):
            activate((doc, *node), None)
    while True:
        if time.monotonic() - start >= budgets.seconds:
            stopped = "seconds"
            break
        if steps >= budgets.steps or tokens >= budgets.tokens:
            stopped = "steps" if steps >= budgets.steps else "tokens"
            break
        best_few: list[tuple[float, Key]] = []  # popped, best first
        while heap and len(best_few) < (1 if choose is None else CHOICES):
            value, key = -heap[0][0], heapq.heappop(heap)[1]
            if scores.get(key) == value:  # else stale: lifted since, or pruned
                best_few.append((value, key))
        if not best_few:
            stopped = "tokens" if too_big else "exhausted"
            break
        pick = 0 if choose is None else choose(question, [(k, element(k), v) for v, k in best_few], len(opened))
        for i, (v, k) in enumerate(best_few):
            if i != pick:
                heapq.heappush(heap, (-v, k))
        if pick is None:
            stopped = "driver"
            break
        value, key = best_few[pick]
        del scores[key]
        text = element(key).text
        size, left = count_tokens(text), budgets.tokens - tokens
        if size > left and size <= budgets.tokens:
            too_big = True
            dropped.add(key)
            moves.append(Move(steps, "prune", key, None, value, tokens))
            continue
        opened[key] = text if size <= left else _cut(text, left)
        steps, tokens = steps + 1, tokens + min(size, left)
        best = value if best is None else max(best, value)
        moves.append(Move(steps, "open", key, None, value, tokens))
        for other in sorted(k for k, v in scores.items() if v < PRUNE * best):
            dropped.add(other)
            moves.append(Move(steps, "prune", other, None, scores.pop(other), tokens))
        if steps >= budgets.steps or tokens >= budgets.tokens or time.monotonic() - start >= budgets.seconds:
            continue  # no expand: the loop's head says which budget ended the walk
        steps += 1
        moves.append(Move(steps, "expand", key, None, value, tokens))
        graph, node = graphs[key[0]], key[1:]
        found = list(dict.fromkeys((n, kind) for n, kind, _ in graph.neighbours(node, EDGES)))
        if element(key).kind == "heading":
            found += [(n, "section") for n in graph.children(node)]
        for kind in EDGES[:1] + ("section",) + EDGES[1:]:
            for n, k in found:
                if k == kind:
                    activate((key[0], *n), k, value if k == "caption" else None)
    moves.append(Move(steps, "stop", (docs[0], 0, 0) if docs else ("", 0, 0), None, best or 0.0, tokens))
    order = {doc: i for i, doc in enumerate(docs)}
    keys = sorted(opened, key=lambda k: (order[k[0]], k[1], k[2]))
    rows = [_row(k, element(k), opened[k]) for k in keys]
    return Evidence(keys, evidence_pages(rows), tokens, steps, time.monotonic() - start, moves, stopped)


def _row(key: Key, e: Element, text: str) -> dict:
    return {"doc_id": key[0], "page": key[1], "element": key[2], "kind": e.kind, "bbox": list(e.bbox), "text": text}


def evidence_rows(store: Store, evidence: Evidence) -> list[dict]:
    """The evidence's elements as the ask graph's state keeps them (ids and text): doc_id, page, element,
    kind, bbox and the opened text, in reading order."""
    texts = {(p.doc_id, p.page, c.chunk): c.text for p in evidence.pages for c in p.chunks}
    return [_row(k, store.graphs.get(k[0]).nodes[k[1:]], texts[k]) for k in evidence.elements]


def evidence_pages(rows: list[dict]) -> list[PageText]:
    """The answerer's pages from evidence rows (in reading order): one PageText per page, one chunk per element."""
    pages: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        pages.setdefault((r["doc_id"], r["page"]), []).append(r)
    return [PageText(doc, page, "\n".join(r["text"] for r in rs if r["text"]),
                     [ChunkRecord(doc, page, r["element"], r["text"], tuple(r["bbox"])) for r in rs])
            for (doc, page), rs in pages.items()]


def pages_within(pages: list[PageText], tokens: int) -> list[PageText]:
    """The page pipeline's pages cut to `tokens` (by `count_tokens`): whole pages in order, the last one cut
    (its chunks kept, for citing on that page), for comparisons at an equal budget."""
    out, left = [], tokens
    for p in pages:
        if left <= 0:
            break
        size = count_tokens(p.text)
        out.append(p if size <= left else PageText(p.doc_id, p.page, _cut(p.text, left), p.chunks))
        left -= size
    return out

"""The rerank tool: a page-relevance scorer of stored pages, (question, [(doc_id, page)]) -> one score each.

Two scorers: the Doc-REFRAG reader's page relevance, P("Yes") over each page's compressed chunks
(one batched forward per 10 pages; the default), and a local chat model's P("Yes") over each page's
text as the chat answerer reads it (a text cross-encoder: slower, and only as good as the model).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from docrefrag.agents import prompts
from docrefrag.agents.answer import page_texts
from docrefrag.agents.llm import LocalChatModel, is_local_model
from docrefrag.core.reader import DocRefragReader
from docrefrag.indexes.store import Store

Reranker = Callable[[str, list[tuple[str, int]]], list[float]]


def reorder(reranker: Reranker, question: str, pages: list[tuple[str, int]]) -> tuple[list[int], list[float]]:
    """The positions of `pages` best first by the reranker's scores (a tie keeps the given order), and the
    scores: the one reranking of the ask graph and of the evaluation harness."""
    scores = [float(s) for s in reranker(question, pages)]
    return sorted(range(len(pages)), key=lambda i: -scores[i]), scores


def reader_reranker(reader: DocRefragReader, store: Store) -> Reranker:
    """P("Yes") of the Doc-REFRAG reader per page."""

    def score(question: str, pages: list[tuple[str, int]]) -> list[float]:
        if not pages:
            return []
        tokens = torch.from_numpy(store.pages.stacked_tokens(pages))
        regions = reader.page_regions([store.pages.get(*key) for key in pages], math.isqrt(tokens.shape[1]))
        return reader.relevance(question, tokens, regions)

    return score


def chat_reranker(llm: LocalChatModel, store: Store, chars_per_page: int) -> Reranker:
    """P("Yes") of a local chat model asked whether each page's text (at most `chars_per_page`
    characters, cut to the question's chunks as the chat answerer reads it) answers the question."""

    def score(question: str, pages: list[tuple[str, int]]) -> list[float]:
        texts = page_texts(store, pages, question, chars_per_page)
        return llm.yes_probabilities([prompts.PAGE_RELEVANCE.format(page=p.text, question=question) for p in texts])

    return score


def check_reranker(kind: str, reader: DocRefragReader | None, llm) -> None:
    """A clear error when the scorer `kind` ("reader" or "chat") lacks its model."""
    if kind == "reader" and reader is None:
        raise ValueError("reranking with the Doc-REFRAG reader needs a reader: pass reader=...")
    if kind == "chat" and not is_local_model(llm):
        raise ValueError(f"the chat reranker reads P('Yes') from a local model's logits; the chat model is "
                         f"{type(llm).__name__}: use --llm local or local:DIR, or --reranker reader")
    if kind not in ("reader", "chat"):
        raise ValueError(f"unknown reranker {kind!r}: reader or chat")


def make_reranker(kind: str, store: Store, reader: DocRefragReader | None, llm, chars_per_page: int) -> Reranker:
    """The scorer `kind` ("reader" or "chat"), checked by `check_reranker`."""
    check_reranker(kind, reader, llm)
    return reader_reranker(reader, store) if kind == "reader" else chat_reranker(llm, store, chars_per_page)

"""The rerank tool: the Doc-REFRAG reader's page relevance, P("Yes") over each page's compressed
chunks (one batched forward per 10 pages), as a scorer of stored pages."""

from __future__ import annotations

from typing import Callable

import torch

from docrefrag_core.reader import DocRefragReader
from indexes.store import Store


def reader_reranker(reader: DocRefragReader, store: Store) -> Callable[[str, list[tuple[str, int]]], list[float]]:
    """(question, [(doc_id, page)]) -> P("Yes") per page."""

    def score(question: str, pages: list[tuple[str, int]]) -> list[float]:
        if not pages:
            return []
        return reader.relevance(question, torch.from_numpy(store.stacked_tokens(pages)))

    return score

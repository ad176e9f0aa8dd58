"""Run-time context of the graph: the things a run uses but does not persist (store, models, config).
The config, `AskConfig`, is in graph/config.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel

from docrefrag.graph.config import AskConfig
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store


@dataclass
class AskContext:
    store: Store
    searcher: HybridSearcher
    llm: BaseChatModel
    config: AskConfig = field(default_factory=AskConfig)
    # the Doc-REFRAG reader: answers when config.reading.answerer == "reader", reranks when its reranker == "reader"
    reader: Any = None
    # (question, [(doc_id, page)]) -> one relevance score per page; None keeps the fused order
    reranker: Callable[[str, list[tuple[str, int]]], list[float]] | None = None

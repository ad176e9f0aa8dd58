"""The public Python API; the CLI is a thin layer over it.

    from docrefrag import DocRefrag
    with DocRefrag(store="my-store") as dr:
        dr.ingest(["report.pdf"])
        for hit in dr.search("net revenue 2023", k=5):
            print(hit.doc_id, hit.page, hit.fused)
"""

from __future__ import annotations

import os
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import platformdirs

from indexes.fusion import FusionMethod
from indexes.hybrid import Hit, HybridSearcher
from indexes.ingest import IngestResult, Ingestor
from indexes.errors import StoreError
from indexes.store import DocInfo, Store

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from graph.context import AskConfig


@dataclass
class AskResult:
    question: str
    answer: str
    claims: list[dict]  # each: text, citations [{doc_id, page (1-based), bbox, snippet}]
    confidence: float  # the validator's
    rounds: int
    seconds: float
    ttft_s: float  # time until the answer text existed (the answer is generated in one go)
    tokens: int  # LLM output tokens of the answer generations
    thread_id: str  # checkpoint id: inspect or resume the run
    trace: list[dict] = field(default_factory=list)


def default_store() -> Path:
    """`$DOCREFRAG_STORE`, else the user data dir (e.g. ~/.local/share/docrefrag/store)."""
    env = os.environ.get("DOCREFRAG_STORE")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("docrefrag")) / "store"


class DocRefrag:
    def __init__(self, store: Path | str | None = None, qdrant_url: str | None = None,
                 qdrant_api_key: str | None = None) -> None:
        self.store_path = Path(store).expanduser() if store is not None else default_store()
        self.qdrant_url = qdrant_url
        self.qdrant_api_key = qdrant_api_key or os.environ.get("QDRANT_API_KEY")
        self._store: Store | None = None
        self._embedder = None
        self._llm = None

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> "DocRefrag":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open_store(self, create: bool = False) -> Store:
        if self._store is None:
            self._store = Store(self.store_path, self.qdrant_url, self.qdrant_api_key, create=create)
        return self._store

    @property
    def embedder(self):
        """The query embedder (the page encoder's text embedder), loaded on first use."""
        if self._embedder is None:
            from docrefrag_core.text_embedder import TextEmbedder

            self._embedder = TextEmbedder.default()
        return self._embedder

    def ingest(self, paths: Iterable[Path | str], workers: int | None = None,
               show_progress: bool = False) -> list[IngestResult]:
        """Ingest PDF files, folders of PDFs and folders of page images; see `indexes.ingest`."""
        store = self.open_store(create=True)
        with Ingestor(store, workers=workers, show_progress=show_progress) as ingestor:
            return ingestor.ingest(paths)

    def search(self, query: str, k: int = 5, doc: str | Sequence[str] | None = None,
               method: FusionMethod = "rrf") -> list[Hit]:
        """Top-k pages for `query` (1-based page numbers), optionally within documents `doc`."""
        store = self.open_store()
        doc_ids = None if doc is None else [store.resolve(d) for d in ([doc] if isinstance(doc, str) else doc)]
        return HybridSearcher(store, self.embedder).search(query, k=k, doc_ids=doc_ids, method=method)

    def docs(self) -> list[DocInfo]:
        return self.open_store().documents()

    def llm(self, spec: "str | BaseChatModel | None" = None) -> "BaseChatModel":
        """A chat model from a spec (see `agents.llm.make_llm`); the local default is shared."""
        from langchain_core.language_models import BaseChatModel

        from agents.llm import LocalChatModel, make_llm

        if isinstance(spec, BaseChatModel):
            return spec
        if spec is None or spec == "local":
            if self._llm is None:
                self._llm = LocalChatModel(max_new_tokens=96)
            return self._llm
        return make_llm(spec)

    def ask(self, question: str, doc: str | Sequence[str] | None = None, llm: "str | BaseChatModel | None" = None,
            config: "AskConfig | None" = None, on_event: Callable[[str, dict], None] | None = None,
            thread_id: str | None = None, nodes: dict | None = None) -> AskResult:
        """Answer `question` from the store's documents (or `doc`), with citations and a trace.

        `on_event(node, update)` is called as each graph node finishes (streaming). The run is
        checkpointed in STORE/checkpoints.sqlite under `thread_id` (a new id if None).
        """
        import sqlite3
        import time
        import uuid
        from contextlib import closing

        from langgraph.checkpoint.sqlite import SqliteSaver

        from graph.context import AskConfig, AskContext
        from graph.graph import build_graph

        if not question.strip():
            raise ValueError("the question is empty")
        store = self.open_store()
        if not store.ready_ids():
            raise StoreError(f"the store at {self.store_path} has no documents; add some with `docrefrag ingest PATH`")
        doc_ids = None if doc is None else [store.resolve(d) for d in ([doc] if isinstance(doc, str) else doc)]
        context = AskContext(store=store, searcher=HybridSearcher(store, self.embedder), llm=self.llm(llm),
                             config=config or AskConfig())
        thread_id = thread_id or uuid.uuid4().hex[:12]
        start = time.perf_counter()
        with closing(sqlite3.connect(self.store_path / "checkpoints.sqlite", check_same_thread=False)) as conn:
            graph = build_graph(nodes, checkpointer=SqliteSaver(conn))
            run = {"configurable": {"thread_id": thread_id}}
            for update in graph.stream({"question": question, "doc_ids": doc_ids, "trace": []}, run,
                                       context=context, stream_mode="updates"):
                for node, values in update.items():
                    if on_event is not None:
                        on_event(node, values or {})
            state = graph.get_state(run).values
        verdict = state.get("verdict", {})
        return AskResult(question=question, answer=state.get("answer", ""), claims=state.get("claims", []),
                         confidence=float(verdict.get("confidence", 0.0)), rounds=int(state.get("round", 1)),
                         seconds=time.perf_counter() - start, ttft_s=float(state.get("ttft_s", 0.0)),
                         tokens=int(state.get("tokens", 0)), thread_id=thread_id, trace=state.get("trace", []))

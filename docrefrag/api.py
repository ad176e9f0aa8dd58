"""The public Python API; the CLI is a thin layer over it.

    from docrefrag import DocRefrag
    with DocRefrag(store="my-store") as dr:
        dr.ingest(["report.pdf"])
        for hit in dr.search("net revenue 2023", k=5):
            print(hit.doc_id, hit.page, hit.fused)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from docrefrag.api_agent import AgentWork
from docrefrag.api_models import ModelWork
from docrefrag.indexes.catalog import DocInfo, unfinished_summary
from docrefrag.indexes.discovery import IngestResult, discover
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.fusion import DEFAULT_METHOD, FusionMethod
from docrefrag.indexes.hybrid import Hit, HybridSearcher
from docrefrag.indexes.ingest import Ingestor, check_workers
from docrefrag.indexes.store import Store
from docrefrag.indexes.writer import IngestLock

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from docrefrag.core.reader import DocRefragReader
    from docrefrag.graph.ask import AskResult, AskRun, StoredRun
    from docrefrag.graph.context import AskConfig
    from docrefrag.graph.run_checkpoints import RunOptions
    from docrefrag.indexes.memory_table import StoredPlan


logger = logging.getLogger(__name__)


def check_question(question: str) -> None:
    if not question.strip():
        raise ValueError('the question is empty; ask it in words, e.g. docrefrag ask "What was net revenue in 2023?"')


def _model_object(llm: str | BaseChatModel | None) -> BaseChatModel | None:
    """`llm` when it is a chat model object, None when it is a spec (or None)."""
    return None if llm is None or isinstance(llm, str) else llm


def default_store() -> Path:
    """`$DOCREFRAG_STORE`, else the user data dir (e.g. ~/.local/share/docrefrag/store)."""
    env = os.environ.get("DOCREFRAG_STORE")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("docrefrag")) / "store"


class DocRefrag(ModelWork, AgentWork):
    """One store and the models over it: ingest, search, ask (and resume); the benchmarks, the reader's
    bench and training, and the model weights (`docrefrag.api_models`); the retrieval agent's instructions
    and their evolution (`docrefrag.api_agent`)."""

    def __init__(self, store: Path | str | None = None, qdrant_url: str | None = None,
                 qdrant_api_key: str | None = None, llm_timeout: float = 60, llm_retries: int = 2) -> None:
        """`llm_timeout` (seconds per read) and `llm_retries`: the chat models made from `openai:` specs."""
        self.store_path = Path(store).expanduser() if store is not None else default_store()
        self.qdrant_url = qdrant_url
        self.qdrant_api_key = qdrant_api_key or os.environ.get("QDRANT_API_KEY")
        self.llm_timeout, self.llm_retries = llm_timeout, llm_retries
        self._store: Store | None = None
        self._embedder = None
        self._encoder = None
        self._llm = None
        self._readers: dict = {}

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> DocRefrag:
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
            from docrefrag.core.text_embedder import TextEmbedder

            self._embedder = TextEmbedder.default()
        return self._embedder

    @property
    def encoder(self):
        """The page encoder over the query embedder (its id must match the store's and the reader's)."""
        if self._encoder is None:
            from docrefrag.core.page_encoder import LayoutGridEncoder

            self._encoder = LayoutGridEncoder(self.embedder)
        return self._encoder

    def reader(self, checkpoint: Path | str | None = None) -> DocRefragReader:
        """The Doc-REFRAG reader, loaded once. Default: the shipped checkpoint's selector over the agents'
        decoder, words compression (`load_words_reader`: the one decoder of the process, training-free);
        a `checkpoint`: that checkpoint as it was trained (its decoder, projector and LoRA)."""
        from docrefrag.core.reader import load_reader, load_words_reader

        if checkpoint not in self._readers:
            load = load_words_reader if checkpoint is None else partial(load_reader, Path(checkpoint))
            self._readers[checkpoint] = load(embed_question=self.embedder.embed_queries,
                                             encoder_id=self.encoder.encoder_id)
        return self._readers[checkpoint]

    def ingest(self, paths: Path | str | Iterable[Path | str], workers: int | None = None,
               show_progress: bool = False) -> list[IngestResult]:
        """Ingest PDF files, folders of PDFs and folders of page images (one path or several); see
        `docrefrag.indexes.ingest`. The retrieval branches' health on each new document is measured at the end."""
        check_workers(workers)
        sources, failed = discover([paths] if isinstance(paths, (str, Path)) else paths)
        if not sources:  # nothing to ingest (wrong paths, unsupported files): no store is created or touched
            return failed
        store = self.open_store(create=True)
        with Ingestor(store, workers=workers, show_progress=show_progress, embedder=self.embedder) as ingestor:
            return ingestor.ingest_sources(sources, failed)

    def upgrade(self) -> list[str]:
        """Build the evidence graph of each ready document whose graph is missing or of an older version, from
        its stored pages (no re-parsing), holding the store's ingest lock; the names of those upgraded."""
        store = self.open_store()
        with IngestLock(store.root):
            return store.graphs.upgrade(store.catalog.documents())

    def search(self, query: str, k: int = 5, doc: str | Sequence[str] | None = None,
               method: FusionMethod = DEFAULT_METHOD) -> list[Hit]:
        """Top-k pages for `query` (1-based page numbers), optionally within documents `doc`."""
        if not query.strip():
            raise ValueError("the query is empty; pass some words to search for")
        store = self.usable_store()
        return HybridSearcher(store, self.embedder).search(query, k=k, doc_ids=self._doc_ids(store, doc), method=method)

    def usable_store(self) -> Store:
        """The store, checked before any model loads (seconds): it has documents and its visual index
        can be opened now (no ingest holds it)."""
        store = self.open_store()
        self._require_documents(store)
        store.visual  # noqa: B018 (opening it is the check)
        store.meta.check_encoder(self.encoder.encoder_id, self.encoder.text_dim)  # pages of another encoder: refused
        return store

    def _require_documents(self, store: Store) -> None:
        """Refuse a store with nothing to search."""
        if store.catalog.ready_ids():
            return
        unfinished = [d for d in store.catalog.documents() if d.status != "ready"]
        if unfinished:
            todo = ("wait for that ingest to finish" if any(d.writer_pid for d in unfinished)
                    else "rerun `docrefrag ingest` on them to finish")
            raise StoreError(f"the store at {self.store_path} has no finished document, only partly ingested ones "
                             f"({unfinished_summary(unfinished)}); {todo}")
        raise StoreError(f"the store at {self.store_path} has no documents; add some with `docrefrag ingest PATH`")

    def docs(self) -> list[DocInfo]:
        return self.open_store().catalog.documents()

    def plans(self) -> list[StoredPlan]:
        """The plans of the store's experience memory (`docrefrag.graph.memory`), oldest first."""
        return self.open_store().memory.plans()

    def clear_plans(self) -> int:
        """Empty the store's experience memory; the number of plans removed."""
        return self.open_store().memory.clear()

    def llm(self, spec: str | BaseChatModel | None = None, timeout: float | None = None,
            max_retries: int | None = None) -> BaseChatModel:
        """A chat model from a spec (see `docrefrag.agents.llm_factory.make_llm`; `timeout` in seconds per read and
        `max_retries` apply to `openai:` endpoints, by default this object's `llm_timeout` and `llm_retries`);
        the local default is shared."""
        from langchain_core.language_models import BaseChatModel

        from docrefrag.agents.llm_factory import make_llm

        if isinstance(spec, BaseChatModel):
            return spec
        if spec is None or spec == "local":
            if self._llm is None:
                self._llm = make_llm("local")
            return self._llm
        return make_llm(spec, timeout=self.llm_timeout if timeout is None else timeout,
                        max_retries=self.llm_retries if max_retries is None else max_retries)

    def ask(self, question: str, doc: str | Sequence[str] | None = None, llm: str | BaseChatModel | None = None,
            config: AskConfig | None = None, on_event: Callable[[str, dict], None] | None = None,
            thread_id: str | None = None, nodes: dict | None = None,
            checkpoint: Path | str | None = None) -> AskResult:
        """Answer `question` from the store's documents (or `doc`), with citations and a trace.

        `on_event(node, update)` is called as each graph node finishes (streaming). The run is kept in
        the store's run checkpoints (STORE/checkpoints.sqlite) under `thread_id` (a new id if None); a failed run's
        error carries its id, and `resume` continues it. `checkpoint` is the Doc-REFRAG reader's
        (default: the one shipped in the package).
        """
        from docrefrag.graph.ask import AskRun
        from docrefrag.graph.run_checkpoints import new_run_id

        check_question(question)
        store = self.usable_store()
        run = AskRun(question, thread_id or new_run_id(), self._doc_ids(store, doc))
        return self._run(store, _AskCall(run, llm, config, checkpoint, on_event, nodes))

    def resume(self, thread_id: str, llm: str | BaseChatModel | None = None, config: AskConfig | None = None,
               on_event: Callable[[str, dict], None] | None = None, nodes: dict | None = None,
               checkpoint: Path | str | None = None) -> AskResult:
        """Continue the unfinished run `thread_id` (one whose LLM failed, say) from its last checkpoint,
        with its own question and documents and the options it was started with (`docrefrag.graph.run_checkpoints`): an
        option left None takes the stored value; one that differs from it is refused (ValueError)."""
        from docrefrag.graph.ask import AskRun

        store = self.usable_store()
        options = self.resume_options(thread_id, llm, config, checkpoint)
        return self._run(store, _AskCall(AskRun("", thread_id, resume=True), _model_object(llm) or options.llm,
                                         options.config, options.reader_checkpoint, on_event, nodes))

    def resume_options(self, thread_id: str, llm: str | BaseChatModel | None = None, config: AskConfig | None = None,
                       checkpoint: Path | str | None = None) -> RunOptions:
        """What `resume` runs `thread_id` with: its stored options, with the given ones where they
        agree; a given option that differs from the stored one raises ValueError naming both."""
        from docrefrag.graph.run_checkpoints import recorded_run, resume_options

        model = _model_object(llm)
        return resume_options(thread_id, recorded_run(self._checkpoints(), thread_id),
                              self._spec(model) if model is not None else llm, config,
                              None if checkpoint is None else str(checkpoint), model_given=model is not None)

    def run_options(self, thread_id: str) -> RunOptions | None:
        """The options run `thread_id` was started with (`docrefrag.graph.run_checkpoints`); None for an unknown
        run."""
        from docrefrag.graph.run_checkpoints import recorded_run

        return recorded_run(self._checkpoints(), thread_id)

    def stored_run(self, thread_id: str) -> StoredRun | None:
        """Run `thread_id` as its checkpoints hold it (`docrefrag.graph.ask.StoredRun`): finished, with its
        result, or unfinished, with the nodes a `resume` would run; None for an unknown run."""
        from docrefrag.graph.ask import stored_run

        options = self.run_options(thread_id)
        return stored_run(self._checkpoints(), thread_id, options.config if options else None)

    @staticmethod
    def _spec(model: BaseChatModel) -> str | None:
        from docrefrag.agents.llm_factory import llm_spec

        return llm_spec(model)

    def _checkpoints(self) -> Path:
        """The store's run checkpoints file (`docrefrag.graph.run_checkpoints.run_checkpoints`)."""
        from docrefrag.graph.run_checkpoints import run_checkpoints

        return run_checkpoints(self.open_store().root)

    @staticmethod
    def _doc_ids(store: Store, doc: str | Sequence[str] | None) -> list[str] | None:
        """The ids of the documents `doc` names (ids, id prefixes or names); None for every document."""
        return None if doc is None else [store.catalog.resolve(d) for d in ([doc] if isinstance(doc, str) else doc)]

    def _run(self, store: Store, call: _AskCall) -> AskResult:
        """Load the models `call` needs, record its options (a new run: a resume continues with them) and
        run it (`docrefrag.graph.ask.run_ask`)."""
        from docrefrag.graph.ask import ask_context, run_ask
        from docrefrag.graph.context import AskConfig
        from docrefrag.graph.run_checkpoints import RunOptions, record_run, run_checkpoints

        config = call.config or AskConfig()
        chat_model = self.llm(call.llm)  # a bad --llm fails here, before seconds of loading the reader
        reader = self.reader(call.reader_checkpoint) if config.needs_reader else None
        context = ask_context(store, HybridSearcher(store, self.embedder), chat_model, config, reader)
        checkpoints = run_checkpoints(store.root)
        if not call.run.resume:  # a resume continues with these (graph.run_checkpoints)
            record_run(checkpoints, call.run.run_id, RunOptions(
                call.llm if isinstance(call.llm, str) else self._spec(chat_model), config,
                None if call.reader_checkpoint is None else str(call.reader_checkpoint)))
        return run_ask(context, call.run, checkpoints, call.on_event, call.nodes)


@dataclass(frozen=True)
class _AskCall:
    """One ask or resume as the API received it: the run, and what it runs with."""

    run: AskRun
    llm: str | BaseChatModel | None  # a spec or a chat model object
    config: AskConfig | None  # None: the defaults
    reader_checkpoint: Path | str | None  # the reader's weights; None: the ones shipped in the package
    on_event: Callable[[str, dict], None] | None
    nodes: dict | None  # graph nodes replaced (`docrefrag.graph.graph.build_graph`)

"""One run of the ask graph: build the run's context, stream node events, keep the run checkpoints, collect the
result (graph/run_checkpoints.py names their file and the run ids)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.sqlite import SqliteSaver

from docrefrag.agents.answer import is_unanswerable
from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.graph.context import AskConfig, AskContext
from docrefrag.graph.graph import build_graph
from docrefrag.graph.memory import remember
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store


@dataclass
class AskResult:
    question: str
    answer: str
    claims: list[dict]  # each: text, citations [{doc_id, page (1-based), bbox, snippet}]
    confidence: float  # the validator's
    rounds: int
    seconds: float
    ttft_s: float  # time until the first answer text existed (answers are generated in one go)
    tokens: int  # LLM output tokens of the answer generations
    thread_id: str  # the run id (its thread in the run checkpoints): inspect or resume the run
    trace: list[dict] = field(default_factory=list)
    withheld: str = ""  # the best answer found when no round's validation supported it (the answer is then
    # "Not answerable"; AskConfig.validation.abstain)
    supported: bool = False  # the best round's validator confidence reached AskConfig.validation.tau
    unsupported_reason: str = ""  # when not supported: what the validation found missing, in one sentence


@dataclass(frozen=True)
class AskRun:
    """What one run asks: `question` on `doc_ids` (None: every document) under the run id `run_id`, or,
    with `resume`, the unfinished run `run_id` continued from its last checkpoint (its own question)."""

    question: str
    run_id: str
    doc_ids: list[str] | None = None
    resume: bool = False


def ask_context(store: Store, searcher: HybridSearcher, llm: BaseChatModel, config: AskConfig,
                reader=None) -> AskContext:
    """The context of runs under `config`: the reranker it names is built here. `reader` (a
    DocRefragReader) is required when the config's answerer is "reader" or it reranks with the reader."""
    if reader is None and config.needs_reader:
        raise ValueError("this AskConfig reads or reranks with the Doc-REFRAG reader: pass reader=..., "
                         "or use AskConfig.of(answerer='chat') and no reranking or reranker='chat'")
    reranker, reading = None, config.reading
    if reading.rerank:
        from docrefrag.agents.rerank import make_reranker

        reranker = make_reranker(reading.reranker, store, reader, llm, reading.chars_per_page)
    return AskContext(store=store, searcher=searcher, llm=llm, config=config, reader=reader, reranker=reranker)


def run_ask(context: AskContext, run: AskRun, checkpoints: Path,
            on_event: Callable[[str, dict], None] | None = None, nodes: dict | None = None) -> AskResult:
    """Run the graph under `context` (`ask_context`); `checkpoints` is the SQLite file of the checkpointer
    (`graph.run_checkpoints.run_checkpoints`), `on_event(node, update)` is called as each node finishes, and `nodes`
    replaces graph nodes (`build_graph`). The one way a run starts: the API (and through it the CLI and
    the server) and the benchmark harness call it.

    A run that fails (a dead LLM endpoint) keeps its checkpoint; the error carries a note with its
    run id. A resumed run's trace covers the whole run. A new question on a used run id starts afresh
    and its result holds only its own trace.

    The answer is the best-validated round's; when even that one's validator confidence is below
    `config.validation.tau` (no round found support), the answer is "Not answerable" and the unsupported
    answer is kept in `withheld` (unless `abstain` is off). A supported answer's plan goes into the
    store's experience memory (`config.search.memory`; graph/memory.py)."""
    config, thread_id = context.config, run.run_id
    start = time.perf_counter()
    with closing(sqlite3.connect(checkpoints, check_same_thread=False)) as conn:
        graph = build_graph(nodes, checkpointer=SqliteSaver(conn))
        configurable = {"configurable": {"thread_id": thread_id}}
        before = graph.get_state(configurable)
        if run.resume and not before.next:
            raise ValueError(f"run {thread_id} has nothing to resume: it finished, or no run has that id in "
                             f"{checkpoints}")
        inputs = None if run.resume else {"question": run.question, "doc_ids": run.doc_ids}
        earlier = 0 if run.resume else len(before.values.get("trace", []))  # entries of a previous run on this thread
        try:
            for update in graph.stream(inputs, configurable, context=context, stream_mode="updates"):
                for node, values in update.items():
                    if on_event is not None:
                        on_event(node, values or {})
        except Exception as e:
            e.add_note(f"(run id {thread_id}: its checkpoint is kept; `docrefrag ask --resume {thread_id}` "
                       "continues it with the same options)")
            raise
        state = graph.get_state(configurable).values
    result = ask_result(state, config, thread_id, time.perf_counter() - start, run.question, earlier)
    if config.search.memory and result.supported and not is_unanswerable(result.answer):  # once, as the run ends
        remember(context.store, context.searcher.embedder, result, state.get("doc_ids"), state.get("plan") or {})
    return result


def ask_result(state: dict, config: AskConfig, thread_id: str, seconds: float, question: str = "",
               earlier: int = 0) -> AskResult:
    """The result of a finished run from its final state (the trace from entry `earlier` on)."""
    best = state.get("best") or {"answer": state.get("answer", ""), "claims": state.get("claims", []),
                                 "verdict": state.get("verdict", {})}  # the best-validated round's answer
    verdict = best["verdict"]
    answer, claims, withheld = best["answer"], best["claims"], ""
    confidence = float(verdict.get("confidence", 0.0))
    supported = confidence >= config.validation.tau
    if config.validation.abstain and not supported and not is_unanswerable(answer):
        answer, claims, withheld = NOT_ANSWERABLE, [], answer  # no round found support: abstain, say what was found
    return AskResult(question=state.get("question", question), answer=answer, claims=claims, withheld=withheld,
                     supported=supported,
                     unsupported_reason="" if supported else unsupported_reason(verdict, config.validation.tau),
                     confidence=confidence, rounds=int(state.get("round", 1)), seconds=seconds,
                     ttft_s=float(state.get("ttft_s") or 0.0), tokens=int(state.get("tokens", 0)),
                     thread_id=thread_id, trace=state.get("trace", [])[earlier:])


@dataclass
class StoredRun:
    """A run as its checkpoints hold it: finished (with its result) or not (the nodes still to run)."""

    thread_id: str
    question: str
    finished: bool
    next: list[str]  # the nodes a resume would run next; empty when finished
    trace: list[dict]  # every node run so far on this thread
    result: AskResult | None  # when finished


def stored_run(checkpoints: Path, thread_id: str, config: AskConfig | None = None) -> StoredRun | None:
    """Run `thread_id` read from the checkpoints file (None when it has no checkpoint there); `config`,
    the run's own (`graph.run_checkpoints`), decides abstention as when it ran."""
    if not checkpoints.is_file():
        return None
    with closing(sqlite3.connect(checkpoints, check_same_thread=False)) as conn:
        snapshot = build_graph(checkpointer=SqliteSaver(conn)).get_state({"configurable": {"thread_id": thread_id}})
    state = snapshot.values
    if not state:
        return None
    finished = not snapshot.next
    result = None
    if finished:
        ended = datetime.fromisoformat(snapshot.created_at).timestamp() if snapshot.created_at else None
        seconds = ended - state["started_at"] if ended and state.get("started_at") else 0.0
        result = ask_result(state, config or AskConfig(), thread_id, max(seconds, 0.0))
    return StoredRun(thread_id, state.get("question", ""), finished, list(snapshot.next), state.get("trace", []),
                     result)


def unsupported_reason(verdict: dict, tau: float) -> str:
    """Why the validation did not support an answer: what the pages lack, or the validator's confidence."""
    missing = verdict.get("missing") or ""
    judged = f"the validator's confidence {float(verdict.get('confidence', 0.0)):.2f} is below {tau:.2f}"
    return f"{missing}; {judged}" if missing else judged

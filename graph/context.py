"""Run-time context of the graph: the things a run uses but does not persist (store, models, config)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel

from docrefrag.agents.planner import DISAGREEMENT
from docrefrag.graph.modes import PLAN_MODES, PlanMode
from docrefrag.indexes.fusion import DEFAULT_METHOD, METHODS, FusionMethod
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store


def _fits(value: Any, expected: type) -> bool:
    """`value` read from a config file fits a field of type `expected` (an int fits a float field)."""
    if isinstance(value, bool) != (expected is bool):
        return False
    return isinstance(value, expected) or (expected is float and isinstance(value, int))




@dataclass(frozen=True)
class AskConfig:
    max_rounds: int = field(default=2, metadata={"help": "retrieval rounds at most (1 = no refinement)"})
    tau: float = field(default=0.5, metadata={"help": "validator confidence below which the query is refined (and, "
                                                          "after the last round, the answer withheld; see abstain)"})
    abstain: bool = field(default=True, metadata={
        "help": "answer 'Not answerable' when no round's answer reaches the validator confidence tau (the "
                "unsupported answer is reported as withheld); off: the best unsupported answer is given"})
    answerer: Literal["reader", "chat"] = field(default="chat", metadata={
        "help": "chat (default): the chat model over the pages' text; reader: the Doc-REFRAG reader over the "
                "pages' tokens (below the chat answerer until its selector learns: docs/decisions/decoders.md)"})
    pages: int = field(default=3, metadata={"help": "pages the chat-model answerer reads"})
    reader_pages: int = field(default=8, metadata={"help": "pages the Doc-REFRAG reader reads (compressed, "
                                                           "the question's chunks expanded)"})
    rerank: bool = field(default=False, metadata={"help": "rerank the fused pages by page relevance (see reranker)"})
    reranker: Literal["reader", "chat"] = field(default="reader", metadata={
        "help": "reader: the Doc-REFRAG reader's P(Yes) over each page's compressed chunks; chat: the local chat "
                "model's P(Yes) over each page's text (slower; as good as the model)"})
    chars_per_page: int = field(default=1500, metadata={"help": "characters of each page the answer agent reads"})
    fusion: FusionMethod = field(default=DEFAULT_METHOD, metadata={"help": "fusion of the sparse and dense branches"})
    hyde: PlanMode = field(default="disagreement", metadata={
        "help": "when to write a hypothetical answer passage (HyDE) for the dense branch: disagreement (only when "
                "the branches' rankings for the question disagree, then search again), always, never"})
    decompose: PlanMode = field(default="never", metadata={
        "help": "when to split the question into sub-queries with the LLM (each searched too): disagreement (only "
                "when the branches' rankings for the question disagree, then search again), always, never "
                "(the default: with the 135M local model no setting gained measurably, see docs/decisions/planner.md)"})
    disagreement: float = field(default=DISAGREEMENT, metadata={
        "help": "query disagreement Q in [0, 1] at or above which the 'disagreement' modes of hyde and decompose act "
                "(0.5: the branches' rankings are uncorrelated or opposed)"})
    time_budget_s: float = field(default=120.0, metadata={"help": "no new round starts after this many seconds"})
    token_budget: int = field(default=2048, metadata={
        "help": "no new round starts once the answers have taken this many LLM output tokens (the answer "
                "generations; planning, validation and refinement replies are short and not counted)"})
    memory: bool = field(default=True, metadata={
        "help": "experience memory (graph/memory.py): seed the search with the sub-queries of the stored plans "
                "of earlier validated answers to similar questions, and store this run's plan when its answer "
                "is validated; off: neither"})
    evidence: Literal["pages", "graph"] = field(default="pages", metadata={
        "help": "what the answerer reads: pages (the top pages' text) or graph (the elements the evidence "
                "controller opens on the evidence graph from the top pages, within the evidence budgets; "
                "agents/evidence.py)"})
    evidence_tokens: int = field(default=1000, metadata={
        "help": "evidence graph: tokens of opened element text at most (a regex estimate, not the decoder's)"})
    evidence_steps: int = field(default=60, metadata={
        "help": "evidence graph: the controller's steps at most (each open and each expand of an element)"})
    evidence_seconds: float = field(default=5.0, metadata={
        "help": "evidence graph: the controller's wall-clock seconds at most (checked before each move: a chat "
                "model's pick under way finishes)"})
    evidence_driver: Literal["score", "llm"] = field(default="score", metadata={
        "help": "evidence graph: what picks the element to open next: score (the best-scored, deterministic, no "
                "LLM call) or llm (the chat model, among the best-scored few; one call per open)"})
    retrieval: Literal["pipeline", "agent"] = field(default="pipeline", metadata={
        "help": "pipeline (default): the planned hybrid search; agent: the retrieval agent calls the tool registry's "
                "tools step by step, following the store's active instructions (docrefrag agent show; "
                "agents/tool_agent.py), and hands the pages it found to the answer agent"})
    agent_steps: int = field(default=5, metadata={"help": "retrieval agent: tool calls at most per round"})

    def __post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {self.max_rounds}")
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"tau is a confidence in [0, 1], got {self.tau}")
        for name, hint in (("pages", "--pages with --answerer chat"), ("reader_pages", "--pages with the reader")):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} ({hint}) is the number of pages read and must be >= 1, "
                                 f"got {getattr(self, name)}")
        for name in ("answerer", "reranker"):
            if getattr(self, name) not in ("reader", "chat"):
                raise ValueError(f"{name} must be 'reader' or 'chat', got {getattr(self, name)!r}")
        if self.retrieval not in ("pipeline", "agent"):
            raise ValueError(f"retrieval must be 'pipeline' or 'agent', got {self.retrieval!r}")
        if self.agent_steps < 1:
            raise ValueError(f"agent_steps is the retrieval agent's tool calls per round and must be >= 1, "
                             f"got {self.agent_steps}")
        if self.fusion not in METHODS:
            raise ValueError(f"fusion must be one of {', '.join(METHODS)}, got {self.fusion!r}")
        for name in ("hyde", "decompose"):
            if getattr(self, name) not in PLAN_MODES:
                raise ValueError(f"{name} must be one of {', '.join(PLAN_MODES)}, got {getattr(self, name)!r}")
        if not 0.0 <= self.disagreement <= 1.0:
            raise ValueError(f"disagreement is a query disagreement in [0, 1], got {self.disagreement}")
        if self.evidence not in ("pages", "graph"):
            raise ValueError(f"evidence must be 'pages' or 'graph', got {self.evidence!r}")
        if self.evidence_driver not in ("score", "llm"):
            raise ValueError(f"evidence_driver must be 'score' or 'llm', got {self.evidence_driver!r}")
        for name in ("evidence_tokens", "evidence_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} is a budget of the evidence controller and must be >= 1, "
                                 f"got {getattr(self, name)}")
        if not self.evidence_seconds > 0:
            raise ValueError(f"evidence_seconds is the evidence controller's time budget and must be > 0, "
                             f"got {self.evidence_seconds}")

    @property
    def needs_reader(self) -> bool:
        """Whether a run with this config uses the Doc-REFRAG reader (to answer or to rerank)."""
        return self.answerer == "reader" or (self.rerank and self.reranker == "reader")

    @classmethod
    def from_file(cls, path: Path, base: AskConfig | None = None) -> AskConfig:
        """A config from a TOML or JSON file of AskConfig fields (the others keep `base`'s values, by
        default the defaults)."""
        try:
            text = Path(path).read_text()
            values = json.loads(text) if Path(path).suffix == ".json" else tomllib.loads(text)
        except FileNotFoundError:
            raise ValueError(f"config file {path} does not exist") from None
        except OSError as e:  # a folder, no permission
            raise ValueError(f"config file {path} cannot be read ({e.strerror}); pass a TOML or JSON file") from None
        except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"config file {path} is not valid "
                             f"{'JSON' if Path(path).suffix == '.json' else 'TOML'}: {e}") from None
        return cls.from_values(values, base, where=f"config file {path}")

    @classmethod
    def from_values(cls, values: object, base: AskConfig | None = None, where: str = "config") -> AskConfig:
        """A config from a mapping of AskConfig fields, as read from a file or a request (`where` names
        it in the errors); the other fields keep `base`'s values, by default the defaults."""
        if not isinstance(values, dict):
            raise ValueError(f"{where} must hold a table of settings, not a {type(values).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(known)}")
        for name, value in values.items():
            expected = type(known[name].default)
            if not _fits(value, expected):
                raise ValueError(f"{where}: {name} must be of type {expected.__name__}, got {value!r} "
                                 f"({known[name].metadata['help']})")
        return replace(base, **values) if base is not None else cls(**values)


@dataclass
class AskContext:
    store: Store
    searcher: HybridSearcher
    llm: BaseChatModel
    config: AskConfig = field(default_factory=AskConfig)
    # the Doc-REFRAG reader: answers when config.answerer == "reader", reranks when config.reranker == "reader"
    reader: Any = None
    # (question, [(doc_id, page)]) -> one relevance score per page; None keeps the fused order
    reranker: Callable[[str, list[tuple[str, int]]], list[float]] | None = None

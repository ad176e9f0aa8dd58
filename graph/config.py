"""The settings of an ask run: `AskConfig`, made of four small configs, one per concern (the refinement
loop's validation and budgets, the search, the reading, the evidence graph's budgets).

Every field carries its help text: the `ask` and `eval` flags are generated from the fields
(docrefrag/cli_parser.py; the flag of a field is its name with dashes), and a config file's errors
quote it. Field names are unique across the groups, so a TOML/JSON file or a request may name the
settings flat (`hyde = "always"`, as the flags do) or by group (`[search]` then `hyde = "always"`);
`AskConfig.flat()` is the flat form that run records and benchmark settings keep. `Literal` fields
are checked against their choices in one place (`_check_choices`).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from docrefrag.graph.modes import PlanMode
from docrefrag.indexes.fusion import DEFAULT_METHOD, DISAGREEMENT, FusionMethod


def _check_choices(config: object) -> None:
    """Each `Literal` field of the dataclass `config` holds one of its choices."""
    hints = get_type_hints(type(config))
    for f in fields(config):
        hint, value = hints[f.name], getattr(config, f.name)
        if get_origin(hint) is Literal and value not in get_args(hint):
            choices = get_args(hint)
            allowed = (f"'{choices[0]}' or '{choices[1]}'" if len(choices) == 2
                       else f"one of {', '.join(choices)}")
            raise ValueError(f"{f.name} must be {allowed}, got {value!r}")


def _at_least_one(config: object, names: tuple[str, ...], what: str) -> None:
    for name in names:
        if getattr(config, name) < 1:
            raise ValueError(f"{name} is {what} and must be >= 1, got {getattr(config, name)}")


@dataclass(frozen=True)
class ValidationConfig:
    """The loop: when an answer counts as supported, and when no new round starts."""

    max_rounds: int = field(default=2, metadata={"help": "retrieval rounds at most (1 = no refinement)"})
    tau: float = field(default=0.5, metadata={"help": "validator confidence below which the query is refined (and, "
                                                          "after the last round, the answer withheld; see abstain)"})
    abstain: bool = field(default=True, metadata={
        "help": "answer 'Not answerable' when no round's answer reaches the validator confidence tau (the "
                "unsupported answer is reported as withheld); off: the best unsupported answer is given"})
    time_budget_s: float = field(default=120.0, metadata={"help": "no new round starts after this many seconds"})
    token_budget: int = field(default=2048, metadata={
        "help": "no new round starts once the answers have taken this many LLM output tokens (the answer "
                "generations; planning, validation and refinement replies are short and not counted)"})

    def __post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {self.max_rounds}")
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"tau is a confidence in [0, 1], got {self.tau}")


@dataclass(frozen=True)
class ReadingConfig:
    """What the answerer reads, and in which order the pages come to it."""

    answerer: Literal["reader", "chat"] = field(default="chat", metadata={
        "help": "chat (default): the chat model over the pages' text; reader: the Doc-REFRAG reader over the "
                "pages' tokens (below the chat answerer until its selector learns: docs/decisions/decoders.md)"})
    pages: int = field(default=3, metadata={
        "help": "pages the chat-model answerer reads (the flag --pages sets the chosen answerer's pages: "
                "with --answerer reader, reader_pages)"})
    reader_pages: int = field(default=8, metadata={"help": "pages the Doc-REFRAG reader reads (compressed, "
                                                           "the question's chunks expanded)"})
    chars_per_page: int = field(default=4000, metadata={"help": "characters of each page the answer agent reads"})
    rerank: bool = field(default=False, metadata={
        "help": "rerank the fused pages by page relevance (see reranker; eval --retrieval-only: one more row, "
                "'reranked')"})
    reranker: Literal["reader", "chat"] = field(default="reader", metadata={
        "help": "reader: the Doc-REFRAG reader's P(Yes) over each page's compressed chunks; chat: the local chat "
                "model's P(Yes) over each page's text (slower; as good as the model); the flag implies --rerank"})
    evidence: Literal["pages", "graph"] = field(default="pages", metadata={
        "help": "what the answerer reads: pages (the top pages' text) or graph (the elements the evidence "
                "controller opens on the evidence graph from the top pages, within the evidence budgets; "
                "agents/evidence.py)"})

    def __post_init__(self) -> None:
        for name, hint in (("pages", "--pages with --answerer chat"), ("reader_pages", "--pages with the reader")):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} ({hint}) is the number of pages read and must be >= 1, "
                                 f"got {getattr(self, name)}")
        _check_choices(self)

    @property
    def pages_key(self) -> str:
        """The field that holds the answerer's page count: reader_pages for the reader, pages for the chat model."""
        return "reader_pages" if self.answerer == "reader" else "pages"

    def pages_read(self, round: int = 1) -> int:
        """The pages the answerer reads in round `round` (1-based): its page count, two more each refinement
        round (the search returns at least as many)."""
        return getattr(self, self.pages_key) + 2 * (round - 1)


@dataclass(frozen=True)
class EvidenceBudgets:
    """The evidence controller on the evidence graph (reading.evidence = "graph"): its budgets and its driver."""

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

    def __post_init__(self) -> None:
        _check_choices(self)
        _at_least_one(self, ("evidence_tokens", "evidence_steps"), "a budget of the evidence controller")
        if not self.evidence_seconds > 0:
            raise ValueError(f"evidence_seconds is the evidence controller's time budget and must be > 0, "
                             f"got {self.evidence_seconds}")


@dataclass(frozen=True)
class SearchConfig:
    """How the pages are found: the retrieval mode, the fusion, the planner's modes, the experience memory."""

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
    memory: bool = field(default=True, metadata={
        "help": "experience memory (graph/memory.py): seed the search with the sub-queries of the stored plans "
                "of earlier validated answers to similar questions, and store this run's plan when its answer "
                "is validated; off: neither (eval: off unless --memory)"})
    retrieval: Literal["pipeline", "agent"] = field(default="pipeline", metadata={
        "help": "pipeline (default): the planned hybrid search; agent: the retrieval agent calls the tool registry's "
                "tools step by step, following the store's active instructions (docrefrag agent show; "
                "agents/tool_agent.py), and hands the pages it found to the answer agent"})
    agent_steps: int = field(default=5, metadata={"help": "retrieval agent: tool calls at most per round"})
    agent_tools: str = field(default="", metadata={
        "help": "retrieval agent: a team's tools besides the built-in ones, comma-separated 'package.module:factory' "
                "paths; each factory takes (store, searcher) and returns a LangChain tool (agents/tools.py)"})

    def __post_init__(self) -> None:
        _check_choices(self)
        _at_least_one(self, ("agent_steps",), "the retrieval agent's tool calls per round")
        if not 0.0 <= self.disagreement <= 1.0:
            raise ValueError(f"disagreement is a query disagreement in [0, 1], got {self.disagreement}")


def _fits(value: Any, expected: type) -> bool:
    """`value` read from a config file fits a field of type `expected` (an int fits a float field)."""
    if isinstance(value, bool) != (expected is bool):
        return False
    return isinstance(value, expected) or (expected is float and isinstance(value, int))


@dataclass(frozen=True)
class AskConfig:
    """The settings of an ask run, by concern; `AskConfig.of(hyde="always", max_rounds=1)` names them flat."""

    validation: ValidationConfig = field(default_factory=ValidationConfig)
    reading: ReadingConfig = field(default_factory=ReadingConfig)
    evidence_budgets: EvidenceBudgets = field(default_factory=EvidenceBudgets)
    search: SearchConfig = field(default_factory=SearchConfig)

    @property
    def needs_reader(self) -> bool:
        """Whether a run with this config uses the Doc-REFRAG reader (to answer or to rerank)."""
        return self.reading.answerer == "reader" or (self.reading.rerank and self.reading.reranker == "reader")

    @classmethod
    def settings(cls) -> dict[str, tuple[str, Field]]:
        """Every setting by its (flat) name: the group it is in and its field, in order."""
        return {f.name: (group.name, f) for group in fields(cls) for f in fields(group.default_factory())}

    def flat(self) -> dict[str, Any]:
        """The settings by flat name (as a flat config file, a run record and the benchmark settings hold them)."""
        return {name: getattr(getattr(self, group), name) for name, (group, _) in self.settings().items()}

    @classmethod
    def of(cls, **values: Any) -> AskConfig:
        """A config from settings named flat, the others at their defaults."""
        return cls.from_values(values, where="AskConfig.of")

    @classmethod
    def from_file(cls, path: Path, base: AskConfig | None = None) -> AskConfig:
        """A config from a TOML or JSON file of settings (flat, or in tables named by group; the others
        keep `base`'s values, by default the defaults)."""
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
        """A config from a mapping of settings, flat or in tables named by group (`{"search": {"hyde": ...}}`),
        as read from a file or a request (`where` names it in the errors); the other settings keep
        `base`'s values, by default the defaults."""
        if not isinstance(values, dict):
            raise ValueError(f"{where} must hold a table of settings, not a {type(values).__name__}")
        known = cls.settings()
        groups = {f.name for f in fields(cls)}
        flat: dict[str, Any] = {}
        for key, value in values.items():
            if key in groups and isinstance(value, dict):
                stray = sorted(k for k in value if known.get(k, ("",))[0] != key)
                if stray:
                    raise ValueError(f"{where}: {key} has no setting(s) {', '.join(stray)}; its settings: "
                                     f"{', '.join(n for n, (g, _) in known.items() if g == key)}")
                flat.update(value)
            else:
                flat[key] = value
        unknown = sorted(set(flat) - set(known))
        if unknown:
            raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(known)}")
        for name, value in flat.items():
            expected = type(known[name][1].default)
            if not _fits(value, expected):
                raise ValueError(f"{where}: {name} must be of type {expected.__name__}, got {value!r} "
                                 f"({known[name][1].metadata['help']})")
        base = base or cls()
        return replace(base, **{group: replace(getattr(base, group),
                                               **{n: v for n, v in flat.items() if known[n][0] == group})
                                for group in groups})

"""DocLongRAG-style noisy page sequences for Doc-REFRAG training: a question's evidence pages hidden
among hard negatives retrieved from the whole corpus with our own index.

For a question whose evidence is pages E of document d, every ready document of the store (d's
other pages included) is ranked by the hybrid search (BM25 + visual index, fused as
`HybridSearcher.search` does; any searcher with the `PageSearch` interface serves); E is taken
out of the ranking, its first `drop_top` pages (3) are dropped, since near the top they may still
answer the question, and the next m ~ U[m_min, m_max] pages (20-30) are the hard negatives. The
negatives are shuffled, so that a page's position tells nothing of its retrieval rank. The evidence pages
then go first ("head", in their given order) or each at a random position ("random", for the
placement ablation). An unanswerable question (no evidence pages) gets the negatives alone.

The randomness of a question's sequence is a function of (seed, doc_id, question, evidence) only:
the same question gets the same sequence whatever the other questions of the run.

Questions come from the synthetic corpus (`EvidenceQuestion.from_fact(fact, doc_id)`) or from any
MMLongBench-style set, e.g. with evals.datasets:
`EvidenceQuestion(q.question, q.answer, mmlongbench_format(q), store.catalog.resolve(q.doc_name), q.evidence_pages)`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tqdm import tqdm

from docrefrag.core.synthetic import Fact

logger = logging.getLogger(__name__)

Placement = Literal["head", "random"]


class PageSearch(Protocol):
    """What the builder needs of the page index (indexes.hybrid.HybridSearcher has it)."""

    store: Any  # .catalog.find(doc_id) -> the document's name, n_pages and status ("ready"); .root

    def ranked_pages(self, query: str, k: int, method: str) -> list[tuple[str, int]]: ...


@dataclass(frozen=True)
class EvidenceQuestion:
    """A question about an ingested document, with the pages that hold its answer."""

    question: str
    answer: str
    answer_format: str  # MMLongBench-Doc format: Int, Float, Str, List, None
    doc_id: str  # the store's id of the document
    evidence_pages: tuple[int, ...]  # 1-based; empty for an unanswerable question

    @classmethod
    def from_fact(cls, fact: Fact, doc_id: str) -> EvidenceQuestion:
        """A synthetic document's question (page 0: unanswerable, no evidence)."""
        return cls(fact.question, fact.answer, fact.answer_format, doc_id, (fact.page,) if fact.page else ())


@dataclass(frozen=True)
class NoisySequence:
    question: str
    answer: str
    answer_format: str
    pages: list[tuple[str, int]]  # (doc_id, 1-based page), in reading order
    evidence: list[int]  # positions in `pages` of the evidence pages, in the question's order
    placement: Placement


@dataclass(frozen=True)
class NoiseConfig:
    m_min: int = field(default=20, metadata={"help": "fewest hard negatives in a sequence"})
    m_max: int = field(default=30, metadata={"help": "most hard negatives in a sequence (m ~ U[m_min, m_max])"})
    drop_top: int = field(default=3, metadata={
        "help": "top-ranked non-evidence pages skipped before the negatives (they may still be relevant)"})
    placement: Placement = field(default="head", metadata={
        "help": "head: evidence pages first; random: each at a random position"})
    seed: int = field(default=0, metadata={"help": "seed of the negatives' count, order and the placement"})
    method: str = field(default="consistency", metadata={
        "help": "fusion of the BM25 and dense rankings (indexes.fusion.METHODS; the searcher checks it)"})

    def __post_init__(self) -> None:
        if not 1 <= self.m_min <= self.m_max:
            raise ValueError(f"need 1 <= m_min <= m_max, got m_min={self.m_min}, m_max={self.m_max}")
        if self.drop_top < 0:
            raise ValueError(f"drop_top must be >= 0, got {self.drop_top}")
        if self.placement not in ("head", "random"):
            raise ValueError(f"placement must be 'head' or 'random', got {self.placement!r}")


def build_sequence(searcher: PageSearch, q: EvidenceQuestion, config: NoiseConfig = NoiseConfig()) -> NoisySequence:
    """The question's evidence pages among m hard negatives (see the module docstring)."""
    doc = searcher.store.catalog.find(q.doc_id)
    if doc is None or doc.status != "ready":
        raise ValueError(f"document {q.doc_id!r} of question {q.question!r} is not a ready document of the store "
                         f"at {searcher.store.root}; ingest it first, or pass the store's doc_id "
                         "(store.catalog.resolve(name))")
    if len(set(q.evidence_pages)) != len(q.evidence_pages) or not all(1 <= p <= doc.n_pages for p in q.evidence_pages):
        raise ValueError(f"evidence pages {q.evidence_pages} of question {q.question!r} must be distinct pages "
                         f"in 1..{doc.n_pages} (the pages of {doc.name})")
    rng = random.Random(f"{config.seed}|{q.doc_id}|{q.question}|{q.evidence_pages}")
    m = rng.randint(config.m_min, config.m_max)
    evidence = [(q.doc_id, p) for p in q.evidence_pages]
    ranked = [key for key in searcher.ranked_pages(q.question, config.drop_top + config.m_max + len(evidence),
                                                   config.method) if key not in evidence]
    if len(ranked) < config.drop_top + m:
        raise ValueError(f"the corpus offers {len(ranked)} pages besides the evidence of {q.question!r}, fewer than "
                         f"drop_top + m = {config.drop_top} + {m}; ingest more documents or lower m_min/m_max")
    negatives = ranked[config.drop_top:config.drop_top + m]
    rng.shuffle(negatives)
    n = len(negatives) + len(evidence)
    if config.placement == "head":
        positions = list(range(len(evidence)))
    else:
        positions = sorted(rng.sample(range(n), len(evidence)))
    slot, rest = dict(zip(positions, evidence, strict=True)), iter(negatives)
    pages = [slot[i] if i in slot else next(rest) for i in range(n)]
    return NoisySequence(q.question, q.answer, q.answer_format, pages, positions, config.placement)


def build_sequences(searcher: PageSearch, questions: Sequence[EvidenceQuestion],
                    config: NoiseConfig = NoiseConfig(), show_progress: bool = False) -> list[NoisySequence]:
    """One noisy sequence per question, in order."""
    items = tqdm(questions, desc="noisy sequences", unit="question") if show_progress else questions
    return [build_sequence(searcher, q, config) for q in items]

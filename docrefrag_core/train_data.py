"""Training data of the Doc-REFRAG reader, drawn from a synthetic corpus ingested into a store.

The corpus is `docs` training documents (`synthetic_training.training_document`, seeds `seed .. seed+docs-1`),
ingested like any user document, so the reader trains on exactly the tokens it reads at run time and
the DocLongRAG builder searches the corpus with our own index. Held-out documents use other seeds.

Examples (each a prompt over a list of pages, a target text, and pseudo-label chunks to expand):

- `parse`: all the text of one page (cut to `target_chars`), 20% of its chunks expanded at random;
- `locate`: the text inside a given box (coordinates in percent of the page), the box's chunks expanded;
- `qa`: a question over its evidence page alone ("single"), with a few pages of its document
  ("multi"), or among hard negatives from the whole corpus ("noisy", `longrag.build_sequence`);
  the pseudo-labels are the chunks that overlap the evidence region (the geometric mapping
  `chunking.chunk_box`), most covered first, up to 20% of the sequence's chunks;
  on noisy sequences 10% plus as many random chunks of other pages; a QA example also carries its
  chunk labels, the chunks whose region holds the answer's words (`chunk_labels`), the selector's
  warm-start targets (`labelled_qa` draws examples that have some);
- `rerank`: a question with its evidence page and pages without it (other pages of its document,
  hard negatives from the corpus), each read alone: "Yes" for the first, "No" for the others.

GRPO may read real pages instead (`PageQuestions`): questions over a store's pages, built by the face.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from docrefrag.core.chunk_labels import PageWords, page_labels
from docrefrag.core.chunking import box_overlap, chunk_box
from docrefrag.core.config import ExampleConfig
from docrefrag.core.longrag import EvidenceQuestion, NoiseConfig, build_sequence
from docrefrag.core.synthetic import SyntheticDoc
from docrefrag.core.synthetic_training import training_document

logger = logging.getLogger(__name__)

Key = tuple[str, int]  # (doc_id, 1-based page)


@dataclass
class Example:
    kind: str  # parse, locate, qa, rerank
    prompt: str
    pages: list[Key]
    target: str
    answer_format: str = "Str"
    expand: list[tuple[int, int]] = field(default_factory=list)  # (page index, chunk) pseudo-labels
    labels: list[tuple[int, int]] = field(default_factory=list)  # (page index, chunk) holding the answer (qa)


@dataclass
class Corpus:
    """Synthetic documents with their store ids, and page tokens and words loaded once."""

    docs: list[SyntheticDoc]
    doc_ids: list[str]
    tokens: dict[Key, np.ndarray]  # (m, d) float16 per page
    records: dict[Key, PageWords]  # the store's page: size in points, words with boxes

    @property
    def keys(self) -> list[Key]:
        return list(self.tokens)


@dataclass
class PageQuestions:
    """Questions over real pages for GRPO, in place of the corpus's draws (the face builds them, e.g. a
    benchmark's questions whose answer its evidence page states, over a store of documents never
    evaluated on): the examples, their pages' tokens and words, and what they are (the stage record's)."""

    examples: list[Example]
    tokens: dict[Key, np.ndarray]  # (m, d) per page
    records: dict[Key, PageWords]
    source: str


def build_corpus(folder: Path, docs: int, pages: int, seed: int, index) -> Corpus:
    """Write the documents into `folder` (skipping those already there), ingest them with
    `index.ingest(paths)` (resumable: unchanged files are skipped; see train.TrainingCorpus) and load
    their tokens from `index.store`."""
    folder.mkdir(parents=True, exist_ok=True)
    synthetic = [training_document(folder / f"train-{seed + i:05d}.pdf", pages, seed + i) for i in range(docs)]
    store = index.store
    results = index.ingest([d.path for d in synthetic])
    by_path = {Path(r.source).resolve(): r for r in results}
    doc_ids = []
    for d in synthetic:
        r = by_path[d.path.resolve()]
        if r.doc_id is None or r.failed_pages:
            raise RuntimeError(f"ingesting training document {d.path} failed: {r.message}")
        doc_ids.append(r.doc_id)
    keys = [(doc_id, n) for doc_id, d in zip(doc_ids, synthetic, strict=True) for n in range(1, len(d.pages) + 1)]
    return Corpus(synthetic, doc_ids, {key: store.pages.tokens(*key).tokens.astype(np.float16) for key in keys},
                  {key: store.pages.get(*key) for key in keys})


class ExampleSampler:
    """Draws examples deterministically from (seed, step), so a resumed run draws the same ones."""

    def __init__(self, corpus: Corpus, searcher, config: ExampleConfig, seed: int) -> None:
        self.corpus, self.searcher, self.config, self.seed = corpus, searcher, config, seed
        self.questions = [(doc_id, q) for doc_id, d in zip(corpus.doc_ids, corpus.docs, strict=True)
                          for q in d.questions if q.page > 0]
        self.truths = {(doc_id, p.page): p for doc_id, d in zip(corpus.doc_ids, corpus.docs, strict=True)
                       for p in d.pages}

    def rng(self, step: int, salt: str = "") -> random.Random:
        return random.Random(f"{self.seed}|{step}|{salt}")

    def parse(self, step: int) -> Example:
        rng = self.rng(step, "parse")
        key = rng.choice(self.corpus.keys)
        L = self.config.grid ** 2 // self.config.k
        expand = sorted((0, j) for j in rng.sample(range(L), int(self.config.expand_p * L)))
        return Example("parse", "Read the text of the page.", [key],
                       cut_text(self.truths[key].text, self.config.target_chars), expand=expand)

    def locate(self, step: int) -> Example:
        rng = self.rng(step, "locate")
        key = rng.choice(self.corpus.keys)
        region = rng.choice([r for r in self.truths[key].regions if r.text.strip()])
        w, h = self.corpus.records[key].width, self.corpus.records[key].height
        x0, y0, x1, y1 = region.bbox
        box = f"{100 * x0 / w:.0f} {100 * y0 / h:.0f} {100 * x1 / w:.0f} {100 * y1 / h:.0f}"
        return Example("locate", f"Read the text in the box {box}.", [key],
                       cut_text(region.text, self.config.target_chars),
                       expand=self.pseudo_labels([key], 0, region.bbox, self.config.expand_p))

    def qa(self, step: int, level: str, attempt: int = 0) -> Example:
        """A question over pages of `level` (see the module docstring); `attempt` > 0 draws another
        example for the same step (`labelled_qa`)."""
        rng = self.rng(step, f"qa-{level}" + (f"-{attempt}" if attempt else ""))
        doc_id, q = rng.choice(self.questions)
        evidence = (doc_id, q.page)
        if level == "single":
            pages = [evidence]
        elif level == "multi":
            others = [k for k in self.corpus.keys if k[0] == doc_id and k != evidence]
            pages = rng.sample(others, min(len(others), rng.randint(*self.config.multi_pages) - 1))
            pages.insert(rng.randint(0, len(pages)), evidence)
        else:
            lo, hi = self.config.noisy_pages
            seq = build_sequence(self.searcher, EvidenceQuestion.from_fact(q, doc_id),
                                 NoiseConfig(m_min=lo, m_max=hi, placement=self.config.placement,
                                             seed=self.seed + step))
            pages = seq.pages
        p = self.config.expand_p / 2 if level == "noisy" else self.config.expand_p
        expand = self.pseudo_labels(pages, pages.index(evidence), q.bbox, p)
        if level == "noisy":
            expand = self._add_random(expand, pages, pages.index(evidence), rng)
        labels = self.labels(pages, q.question, q.answer)
        return Example("qa", q.question, pages, q.answer, q.answer_format, expand, labels)

    def labelled_qa(self, step: int, level: str, attempts: int = 20) -> Example:
        """The first of `step`'s QA draws with at least one labelled chunk (an answer whose words the
        pages' text layer holds: not a chart's bar heights, say)."""
        for attempt in range(attempts):
            ex = self.qa(step, level, attempt)
            if ex.labels:
                return ex
        raise RuntimeError(f"no labelled chunk in {attempts} QA draws of step {step}: the corpus's answers are not "
                           "in its pages' words; check that its documents ingested with a text layer")

    def labels(self, pages: list[Key], question: str, answer: str) -> list[tuple[int, int]]:
        """The chunks of `pages` that hold the answer (`chunk_labels.label_chunks`)."""
        return page_labels([self.corpus.records[p] for p in pages], question, answer, self.config.grid, self.config.k)

    def rerank(self, step: int) -> Example:
        """A question with its evidence page first, then up to `rerank_pages - 1` pages that do not hold
        it: other pages of its document (what the reranker sorts at run time) and hard negatives from
        the rest of the corpus (`longrag.build_sequence`), each to be read alone."""
        rng = self.rng(step, "rerank")
        doc_id, q = rng.choice(self.questions)
        evidence = (doc_id, q.page)
        lo, hi = self.config.noisy_pages
        seq = build_sequence(self.searcher, EvidenceQuestion.from_fact(q, doc_id),
                             NoiseConfig(m_min=lo, m_max=hi, seed=self.seed + step))
        same = [k for k in self.corpus.keys if k[0] == doc_id and k != evidence]
        wanted = self.config.rerank_pages - 1
        negatives = rng.sample(same, min(len(same), (wanted + 1) // 2))
        negatives += [k for k in seq.pages if k != evidence and k not in negatives][: wanted - len(negatives)]
        return Example("rerank", q.question, [evidence, *negatives], "Yes")

    def pseudo_labels(self, pages: list[Key], evidence: int, bbox: tuple[float, float, float, float],
                      p: float) -> list[tuple[int, int]]:
        """The evidence page's chunks that overlap its region, most-covered first, up to floor(p * n * L)."""
        k, g = self.config.k, self.config.grid
        L = g * g // k
        w, h = self.corpus.records[pages[evidence]].width, self.corpus.records[pages[evidence]].height
        cover = [box_overlap(chunk_box(j, k, g, w, h), bbox) for j in range(L)]
        ranked = [j for j in sorted(range(L), key=lambda j: -cover[j]) if cover[j] > 0]
        return [(evidence, j) for j in sorted(ranked[: int(p * len(pages) * L)])]

    def _add_random(self, expand: list[tuple[int, int]], pages: list[Key], evidence: int,
                    rng: random.Random) -> list[tuple[int, int]]:
        L = self.config.grid ** 2 // self.config.k
        others = [(i, j) for i in range(len(pages)) if i != evidence for j in range(L)]
        return sorted(expand + rng.sample(others, min(len(others), len(expand))))


def cut_text(text: str, chars: int) -> str:
    """`text` with whitespace collapsed, cut at a word boundary to at most `chars` characters."""
    text = " ".join(text.split())
    return text if len(text) <= chars else text[:chars].rsplit(" ", 1)[0]

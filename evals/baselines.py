"""Reader baselines in one harness: the same Doc-REFRAG reader behind different retrieval and reading
pipelines, on the same questions, scored with the official rules, so one run yields one table.

Pipelines (each question's own document; no planner, validator or refinement, so the rows differ
only in what they name):

- `sparse top-5`, `dense top-5`, `rrf top-5`, `consistency top-5`: the fusion method's top 5 pages,
  read compressed with the selector's p = 0.2 expansion;
- the Doc-REFRAG paper's comparison: `top-5 full` (the consistency top 5 read with every token),
  `top-20 reranked to 5` (the reader's page relevance picks 5 of the top 20, read with p = 0.2), and
  `top-20 selective` (all 20 read at once with p = 0.2 expansion).

Per question and pipeline: the prediction, its score, whether an evidence page was read, and the
end-to-end seconds (retrieval + reranking + reading). Rows go to a JSONL log a rerun resumes from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from docrefrag.agents.rerank import reader_reranker, reorder
from docrefrag.core.selector import AllSelector
from docrefrag.evals.answers import score
from docrefrag.evals.datasets import Question
from docrefrag.evals.jsonl import load_rows
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

PIPELINES = ("sparse top-5", "dense top-5", "rrf top-5", "consistency top-5", "top-5 full", "top-20 reranked to 5",
             "top-20 selective")


def _read(reader, store: Store, doc_id: str, pages: list[int], question: str, selector=None) -> str:
    keys = [(doc_id, p) for p in pages]
    tokens = store.pages.stacked_tokens(keys)
    regions = reader.page_regions([store.pages.get(*key) for key in keys], round(tokens.shape[1] ** 0.5))
    return reader.answer(question, torch.from_numpy(tokens), regions, selector=selector).text


def run_pipeline(name: str, q: Question, doc_id: str, store: Store, searcher: HybridSearcher, reader) -> list[int]:
    """The pipeline's pages for the question (read inside `evaluate_baselines`)."""
    cands = searcher.candidates(q.question, [doc_id], k=20)
    method = name.split()[0] if name.split()[0] in ("sparse", "dense", "rrf") else "consistency"
    order = [page for _, page in cands.ranked(method)]
    if name == "top-20 reranked to 5":
        reranked = reorder(reader_reranker(reader, store), q.question, [(doc_id, p) for p in order[:20]])[0]
        return [order[i] for i in reranked[:5]]
    return order[:20] if name == "top-20 selective" else order[:5]


def evaluate_baselines(store: Store, searcher: HybridSearcher, reader, questions: Sequence[Question],
                       doc_ids: dict[str, str], out: Path, pipelines: Sequence[str] = PIPELINES,
                       show_progress: bool = True, settings: dict | None = None) -> list[dict]:
    done = load_rows(out, settings)
    rows = list(done.values())
    with open(out, "a") as f, torch.no_grad():
        for q in tqdm(questions, desc="baselines", unit="q", disable=not show_progress):
            if q.qid in done or q.doc_name not in doc_ids:
                continue
            doc_id = doc_ids[q.doc_name]
            row = {"qid": q.qid, "doc": q.doc_name, "answer": q.answer, "answer_format": q.answer_format,
                   "evidence_pages": list(q.evidence_pages)}
            for name in pipelines:
                start = time.perf_counter()
                pages = run_pipeline(name, q, doc_id, store, searcher, reader)
                pred = _read(reader, store, doc_id, pages, q.question, AllSelector() if name == "top-5 full" else None)
                row[name] = {"pred": pred, "score": score(q, pred), "pages": pages,
                             "evidence_read": bool(set(pages) & set(q.evidence_pages)),
                             "seconds": time.perf_counter() - start}
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows.append(row)
    wanted = {q.qid for q in questions}
    return [r for r in rows if r["qid"] in wanted]


def summary_table(rows: list[dict], pipelines: Sequence[str] = PIPELINES) -> str:
    lines = ["| pipeline | questions | accuracy | evidence page read | seconds p50 | seconds mean |",
             "|---|---|---|---|---|---|"]
    for name in pipelines:
        cells = [r[name] for r in rows if name in r]
        if not cells:
            continue
        sec = [c["seconds"] for c in cells]
        lines.append(f"| {name} | {len(cells)} | {np.mean([c['score'] for c in cells]):.3f} | "
                     f"{np.mean([c['evidence_read'] for c in cells]):.2f} | {np.median(sec):.2f} | "
                     f"{np.mean(sec):.2f} |")
    return "\n".join(lines)

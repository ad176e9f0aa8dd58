"""The chunk selectors side by side, and the reader against full text (issue 40, items 4 and 5).

    python -m docrefrag.evals.reader_evals compare [--stated DIR | --longdocurl DIR] [--store STORE] [--limit 60]
        [--answers 16] [--warmstart DIR] [--json OUT] [--markdown OUT]
    python -m docrefrag.evals.reader_evals full-text (--stated DIR | --longdocurl DIR) --store STORE [--limit 30]
        [--pages 3] [--p 0.2] [--json OUT] [--markdown OUT]

- compare: labelled readings (a question over its pages, the chunks that hold its answer labelled by
  `chunk_labels`): held-out training-style documents, or a stated-facts / LongDocURL set with its
  evidence pages among other pages of its document. Per budget p and selector: the share of the labelled
  chunks among those expanded, over every reading; over the first `answers` readings, the decoder's
  mean log-probability of the gold answer given the built input (the GRPO reward) and the official score
  of the answer the reader decodes from that same input (`final_answer`, as `ask` returns it); and the
  selection time (a reading's first selection, the perplexity pass included). Selectors: random, MiniLM
  similarity, the decoder's perplexity, least predictable first (`docrefrag.core.perplexity`, REFRAG's
  heuristic), supervised (a warm-start checkpoint's selector) and supervised + GRPO (the checkpoint's).
- full-text: per question, the consistency fusion's top pages of its document, read by the reader at p
  (as `ask` reads) and by the same decoder reading those pages' stored text in full (M3DocRAG-style: the
  same prompt frame and greedy decoding, no compression), with the reader's LoRA and without it (the
  decoder as it ships); accuracy (official rules) and the time to first token from the loaded pages
  (region words or text tokenised, selection, prefill), in one process.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from docrefrag.agents.answer import final_answer
from docrefrag.core.perplexity import PerplexitySelector
from docrefrag.core.reader import ANSWER_SUFFIX
from docrefrag.core.selector import ChunkSelector, RandomSelector, Selector, SimilaritySelector
from docrefrag.core.train_data import Example

PS = (0.1, 0.2, 0.3)


@dataclass
class Reading:
    """One labelled question over its pages, loaded for the reader."""

    ex: Example  # prompt, pages, target (the gold answer), labels ((page index, chunk) holding it)
    tokens: torch.Tensor  # (n, m, d) page tokens
    regions: list[list[list[int]]]  # per page, per chunk: the region's token ids (`page_regions`)
    score: Callable[[str], float]  # the official score of a predicted answer


SelectorFactory = Callable[[Reading], Selector]  # a reading -> the selector that reads it


def checkpoint_selector(path: Path, reader) -> ChunkSelector:
    """The selector of the reader checkpoint at `path` (its other parts are not read), for `reader`'s pages and
    questions (the same token and question dimensions; the decoder may differ)."""
    from safetensors.torch import load_file

    from docrefrag.core.checkpoint import checkpoint_reader_config

    config = checkpoint_reader_config(path)
    if (config.token_dim, config.question_dim, config.k) != (reader.config.token_dim, reader.config.question_dim,
                                                             reader.config.k):
        raise ValueError(f"the selector checkpoint {path} reads other chunks than the reader ({config} vs "
                         f"{reader.config}); pass checkpoints over the same page encoder and chunk size")
    selector = ChunkSelector(config)
    parts = load_file(Path(path) / "reader.safetensors")
    selector.load_state_dict({k[len("selector."):]: v.float() for k, v in parts.items() if k.startswith("selector.")})
    return selector.eval().to(reader.norm.weight.device)


def selector_factories(reader, supervised: ChunkSelector | None = None) -> dict[str, SelectorFactory]:
    """The compared selectors, by name: one object for all readings, or one per reading (perplexity)."""
    random, similarity = RandomSelector(0), SimilaritySelector(reader.config.question_dim)
    choices: dict[str, SelectorFactory] = {
        "random": lambda r: random, "MiniLM similarity": lambda r: similarity,
        "decoder perplexity": lambda r: PerplexitySelector(reader, r.ex.prompt, r.regions)}
    if supervised is not None:
        choices["supervised (warm start)"] = lambda r: supervised
    choices["supervised + GRPO (checkpoint)"] = lambda r: reader.selector
    return choices


def compare(reader, readings: list[Reading], factories: dict[str, SelectorFactory], ps=PS, answers: int = 16,
            answer_ps=PS, show_progress: bool = True) -> list[dict]:
    """One row per (p, selector): recall of the labelled chunks (every reading), the gold answer's mean
    log-probability and the answer's official score (the first `answers` readings, at the budgets
    `answer_ps`: a decoded answer costs seconds on a CPU), selection time."""
    cells = {(p, name): {"recall": [], "logprob": [], "score": [], "select_ms": []} for p in ps for name in factories}
    with torch.no_grad():
        for index, r in enumerate(tqdm(readings, desc="compare", unit="reading", disable=not show_progress)):
            chunks = reader.chunks(r.tokens)  # (n, L, k, d)
            for name, make in factories.items():
                selector = make(r)
                for p in ps:
                    cell = cells[p, name]
                    start = time.perf_counter()
                    expand = reader.select(r.ex.prompt, chunks, p, selector)  # (n, L)
                    if p == ps[0]:  # the first selection of a reading pays for any scoring pass
                        cell["select_ms"].append((time.perf_counter() - start) * 1000)
                    cell["recall"].append(sum(bool(expand[i, j]) for i, j in r.ex.labels) / len(r.ex.labels))
                    if index < answers and p in answer_ps:
                        seq = reader.build(r.ex.prompt, chunks, expand, r.regions, ANSWER_SUFFIX)
                        cell["logprob"].append(reader.answer_reward(seq, r.ex.target))
                        ids, _, _ = reader.decode(seq.embeds, reader.config.max_new_tokens, time.perf_counter(), True)
                        text = reader.tokenizer.decode(ids, skip_special_tokens=True).strip()
                        cell["score"].append(r.score(final_answer(r.ex.prompt, text)))
    rows = []
    for (p, name), c in cells.items():
        rows.append({"p": p, "selector": name, "readings": len(c["recall"]), "recall": _mean(c["recall"]),
                     "recall_se": _se(c["recall"]), "answers": len(c["score"]), "answer_logprob": _mean(c["logprob"]),
                     "answer_logprob_se": _se(c["logprob"]), "accuracy": _mean(c["score"]),
                     "select_ms_p50": round(float(np.median(c["select_ms"])), 1) if c["select_ms"] else None})
    return rows


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 3) if values else None


def _se(values: list[float]) -> float | None:
    return round(float(np.std(values) / np.sqrt(len(values))), 3) if values else None


def compare_markdown(rows: list[dict]) -> str:
    """One line per selector: recall, the gold answer's log-likelihood and accuracy at each p, selection time."""
    ps = sorted({r["p"] for r in rows})
    names = list(dict.fromkeys(r["selector"] for r in rows))
    cell = {(r["p"], r["selector"]): r for r in rows}
    head = (["selector"] + [f"recall p={p}" for p in ps] + [f"log-lik. p={p}" for p in ps]
            + [f"accuracy p={p}" for p in ps] + ["selection ms (p50)"])
    answers = max(r["answers"] for r in rows)
    lines = [f"readings: {rows[0]['readings']} (recall), {answers} (log-likelihood of the gold answer, accuracy)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def fmt(value: float | None, se: float | None = None) -> str:
        return "-" if value is None else f"{value:.3f}" + (f" ± {se:.3f}" if se is not None else "")

    for name in names:
        row = [cell[p, name] for p in ps]
        lines.append("| " + " | ".join([name] + [fmt(c["recall"], c["recall_se"]) for c in row]
                                       + [fmt(c["answer_logprob"]) for c in row] + [fmt(c["accuracy"]) for c in row]
                                       + [str(row[0]["select_ms_p50"])]) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------ the reader against full text


def full_text_embeds(reader, question: str, texts: list[str]) -> torch.Tensor:
    """(S, hidden) the decoder's own embeddings of the pages' whole text in the reader's prompt frame
    ("Question: ...", "Page i:" before each page, the answer suffix): nothing compressed."""
    parts = [reader.text_embeds(f"Question: {question}\n")]
    for i, text in enumerate(texts):
        parts += [reader.text_embeds(f"Page {i + 1}:"), reader.text_embeds(" " + text)]
    return torch.cat(parts + [reader.text_embeds(ANSWER_SUFFIX)])


def full_text(reader, store, searcher, questions: list, doc_ids: dict[str, str], score: Callable, pages: int = 3,
              p: float = 0.2, show_progress: bool = True) -> list[dict]:
    """Per question (`evals.datasets.Question` on a document of `doc_ids`): its document's top `pages` pages by
    the consistency fusion, read by the reader at `p` and as full text; `score(question, prediction)`."""
    rows = []
    with torch.no_grad():
        for index, q in enumerate(tqdm(questions, desc="full-text", unit="q", disable=not show_progress)):
            doc_id = doc_ids[q.doc_name]
            keys = searcher.candidates(q.question, [doc_id], k=pages).ranked("consistency")[:pages]
            tokens = torch.from_numpy(store.pages.stacked_tokens(keys))  # (n, m, d)
            records, texts = [store.pages.get(*key) for key in keys], [store.pages.markdown(*key) for key in keys]
            if index == 0:  # the first prefills of a process pay for set-up: warm both readings up
                read_selective(reader, q.question, tokens, records, p)
                read_full(reader, q.question, texts)
            modes = {"reader": read_selective(reader, q.question, tokens, records, p),
                     "full text": read_full(reader, q.question, texts)}
            if hasattr(reader.decoder, "disable_adapter"):  # the decoder as it ships, without the reader's LoRA
                with reader.decoder.disable_adapter():
                    modes["full text, no LoRA"] = read_full(reader, q.question, texts)
            for mode in modes.values():
                mode["score"] = score(q, mode["pred"])
            rows.append({"qid": q.qid, "question": q.question, "answer": q.answer, "pages": [page for _, page in keys],
                         "evidence_read": bool({page for _, page in keys} & set(q.evidence_pages)), **modes})
    return rows


def read_selective(reader, question: str, tokens: torch.Tensor, records: list, p: float) -> dict:
    """The reader's answer over the pages (n, m, d) at budget p, as `ask` reads; TTFT from the region words."""
    start = time.perf_counter()
    regions = reader.page_regions(records, round(tokens.shape[1] ** 0.5))
    words_s = time.perf_counter() - start  # the region words' tokens; `answer` times the rest
    out = reader.answer(question, tokens, regions, p=p)
    return {"pred": final_answer(question, out.text), "tokens": out.input_tokens,
            "ttft_s": round(words_s + out.ttft_s, 3)}


def read_full(reader, question: str, texts: list[str]) -> dict:
    """The same decoder's answer over the pages' whole text; TTFT from the text."""
    start = time.perf_counter()
    embeds = full_text_embeds(reader, question, texts)
    ids, ttft, _ = reader.decode(embeds, reader.config.max_new_tokens, start, True)
    text = reader.tokenizer.decode(ids, skip_special_tokens=True).strip()
    return {"pred": final_answer(question, text), "tokens": int(embeds.shape[0]), "ttft_s": round(ttft, 3)}


def full_text_markdown(rows: list[dict]) -> str:
    """Accuracy, time to first token and input length of the two readings, and the TTFT ratio per question."""
    lines = [f"questions: {len(rows)}; an evidence page among the pages read: "
             f"{sum(r['evidence_read'] for r in rows)}", "",
             "| reading | accuracy | TTFT p50 (s) | TTFT mean (s) | input tokens (mean) | TTFT speed-up vs full text "
             "(median of per-question ratios) |", "|---|---|---|---|---|---|"]
    for mode in ("full text", "full text, no LoRA", "reader"):
        if mode not in rows[0]:
            continue
        cells = [r[mode] for r in rows]
        ttft = [c["ttft_s"] for c in cells]
        ratio = statistics.median(r["full text"]["ttft_s"] / r[mode]["ttft_s"] for r in rows)
        lines.append(f"| {mode} | {np.mean([c['score'] for c in cells]):.3f} | {statistics.median(ttft):.2f} | "
                     f"{np.mean(ttft):.2f} | {np.mean([c['tokens'] for c in cells]):.0f} | {ratio:.2f}x |")
    return "\n".join(lines)

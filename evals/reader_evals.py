"""Evaluations of the trained Doc-REFRAG reader on held-out data (issue: training).

    python -m docrefrag.evals.reader_evals reconstruction [--checkpoint DIR] [--json OUT]
    python -m docrefrag.evals.reader_evals training-tasks [--checkpoint DIR] [--limit N]
    python -m docrefrag.evals.reader_evals selectors [--mmlongbench DATA --store STORE] [--limit N] [--plot PNG]
    python -m docrefrag.evals.reader_evals answer-loss [--mmlongbench DATA --store STORE] [--limit N]
    python -m docrefrag.evals.reader_evals recall [--checkpoint DIR] [--limit N] [--stated DIR --store STORE]
    python -m docrefrag.evals.reader_evals compare [--stated DIR | --longdocurl DIR] [--store STORE] [--warmstart DIR]
    python -m docrefrag.evals.reader_evals full-text (--stated DIR | --longdocurl DIR) --store STORE [--pages 3]
        [--stated-text]

- reconstruction: held-out dense-text pages of 500-4,000 characters; the reader's reading of the page
  against the beginning of its text (ANLS, threshold 0.5, and normalised-Levenshtein similarity),
  compressed, with p = 0.2 expansion, and with every chunk expanded (the upper reference).
- training-tasks: stage 1's own tasks (page parsing, box localisation) on held-out training pages,
  scored the same way: whether the reader learnt its training pages apart from the dense-text shift.
- selectors: noisy sequences (the evidence page among hard negatives from our own index); the answer
  score and the selection latency of the random, similarity and trained selectors at p in
  {0.1, ..., 0.3}, with the accuracy-by-budget plot.
- answer-loss: the gold answer's teacher-forced cross-entropy (nats per token) on the same sequences,
  per selector at p = 0.2, between "none" (all compressed) and "all" (all expanded): whether what the
  selector expands matters to the reader at all.
- recall: held-out training-distribution sequences (2-4 pages of a document the training never saw,
  `ExampleSampler.labelled_qa` on documents of other seeds): the share of the labelled chunks (those
  holding the answer's words, `chunk_labels`) among the chunks each selector expands, at p in {0.1,
  0.2, 0.3} (docs/decisions/selector.md); with `--stated`, on the stated-facts reports instead
  (`python -m docrefrag.evals.stated_facts DIR`, ingested into STORE), each answerable question over its
  evidence page and other pages of its report.
- compare, full-text: the selectors side by side (recall, the gold answer's log-likelihood, answer accuracy,
  selection time) and the reader against full text (accuracy, time to first token): `reader_compare`.

Every reading goes through `DocRefragReader.build` with the pages' region words, as `ask` reads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from docrefrag.core.selector import AllSelector, NoneSelector, RandomSelector, SimilaritySelector
from docrefrag.evals.metrics import bootstrap_se
from docrefrag.evals.report import accuracy_by_budget
from docrefrag.evals.score_common import anls, similarity
from docrefrag.evals.score_mmlongbench import mmlongbench_score

HELD_OUT_SEED = 90_000
PS = (0.1, 0.15, 0.2, 0.25, 0.3)


def reconstruction(reader, chars=(500, 1000, 2000, 4000), pages: int = 3, target_chars: int = 160,
                   new_tokens: int = 64) -> list[dict]:
    from docrefrag.core.synthetic_training import dense_text_page
    from docrefrag.core.train_data import cut_text
    from docrefrag.evals.bench_reader import pdf_pages

    rows = []
    modes = {"compressed": NoneSelector(), "selective p=0.2": None, "all expanded": AllSelector()}
    with tempfile.TemporaryDirectory() as tmp:
        for c in chars:
            scores: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
            for s in range(pages):
                pdf = Path(tmp) / f"dense-{c}-{s}.pdf"
                truth = dense_text_page(pdf, c, seed=HELD_OUT_SEED + 10 * c + s)
                tokens, records = pdf_pages(pdf)
                regions = reader.page_regions(records, round(tokens.shape[1] ** 0.5))
                target = cut_text(truth.text, target_chars)
                for mode, selector in modes.items():
                    out = reader.answer("Read the text of the page.", torch.from_numpy(tokens), regions, p=0.2,
                                        selector=selector, max_new_tokens=new_tokens)
                    pred = out.text[: len(target)]
                    scores[mode].append((anls(target, pred), similarity(target, pred)))
            for mode, values in scores.items():
                rows.append({"chars": c, "mode": mode, "pages": pages,
                             "anls": round(statistics.mean(a for a, _ in values), 3),
                             "similarity": round(statistics.mean(b for _, b in values), 3)})
    return rows


def training_task_reconstruction(reader, trainer, n: int, new_tokens: int = 64) -> list[dict]:
    """Stage 1's own tasks on `trainer`'s corpus (held-out seeds: pages of the training distribution the
    reader never saw): page parsing and box localisation, each with its training expansion (20% of the
    chunks at random; the box's chunks), `n` examples each, drawn past any step a run takes."""
    scores: dict[str, list[tuple[float, float]]] = {"parse": [], "locate": []}
    for step in range(10**6, 10**6 + 2 * n):
        ex = trainer.sampler.parse(step) if step % 2 == 0 else trainer.sampler.locate(step)
        seq = trainer.build(reader, ex, trainer.mask(ex.expand, len(ex.pages)))
        ids, _, _ = reader.decode(seq.embeds, new_tokens, time.perf_counter(), True)
        pred = reader.tokenizer.decode(ids, skip_special_tokens=True).strip()[: len(ex.target)]
        scores[ex.kind].append((anls(ex.target, pred), similarity(ex.target, pred)))
    return [{"task": task, "examples": len(v), "anls": round(statistics.mean(a for a, _ in v), 3),
             "similarity": round(statistics.mean(b for _, b in v), 3)} for task, v in scores.items()]


def read_pages(reader, pages_of, keys: list) -> tuple[torch.Tensor, list[list[list[int]]]]:
    """The (n, m, d) tokens and the region token ids of the pages `keys`; `pages_of(keys)` -> (tokens
    (n, m, d), the pages' records with .words, .width, .height)."""
    tokens, records = pages_of(keys)
    tokens = torch.as_tensor(tokens)
    return tokens, reader.page_regions(records, round(tokens.shape[1] ** 0.5))


def selectors(reader, sequences: list, pages_of, ps=PS, seed: int = 0) -> list[dict]:
    """`sequences`: NoisySequence-like (question, answer, answer_format, pages); `pages_of`: see `read_pages`."""
    choices = {"random": RandomSelector(seed), "similarity": SimilaritySelector(reader.config.question_dim),
               "trained (GRPO)": reader.selector}
    rows = []
    for p in ps:
        for name, selector in choices.items():
            scores, select_ms = [], []
            for seq in sequences:
                tokens, regions = read_pages(reader, pages_of, seq.pages)
                chunks = reader.chunks(tokens)
                flat = chunks.reshape(-1, *chunks.shape[2:])
                question = reader.question_vector(seq.question)
                T = int(p * flat.shape[0])
                start = time.perf_counter()
                selector.choose(question, flat, T)
                select_ms.append((time.perf_counter() - start) * 1000)
                out = reader.answer(seq.question, tokens, regions, p=p, selector=selector)
                scores.append(mmlongbench_score(seq.answer, out.text, seq.answer_format))
            rows.append({"p": p, "selector": name, "questions": len(sequences),
                         "accuracy": round(float(np.mean(scores)), 3),
                         "select_ms_p50": round(float(np.median(select_ms)), 2)})
    return rows


def answer_loss(reader, sequences: list, pages_of, p: float = 0.2, seed: int = 0) -> list[dict]:
    """Cross-entropy of the gold answers per selector, in the same question order for every selector and
    checkpoint (paired comparisons; see the module docstring)."""
    choices = {"none": NoneSelector(), "random": RandomSelector(seed),
               "similarity": SimilaritySelector(reader.config.question_dim), "trained (GRPO)": reader.selector,
               "all": AllSelector()}
    losses: dict[str, list[float]] = {name: [] for name in choices}
    for seq in sequences:
        tokens, regions = read_pages(reader, pages_of, seq.pages)
        chunks = reader.chunks(tokens)
        for name, selector in choices.items():
            expand = reader.select(seq.question, chunks, p, selector)
            losses[name].append(float(reader.answer_loss(seq.question, tokens, expand, regions, seq.answer)))
    base = np.array(losses["random"])
    rows = []
    for name, values in losses.items():
        diff = np.array(values) - base  # (questions,) paired with the random selector's loss
        rows.append({"selector": name, "p": p if name not in ("none", "all") else None, "questions": len(values),
                     "answer_nll_mean": round(statistics.mean(values), 4),
                     "answer_nll_median": round(statistics.median(values), 4),
                     "minus_random": round(float(diff.mean()), 4),
                     "minus_random_se": round(bootstrap_se(diff, seed), 4),
                     "per_question": [round(x, 4) for x in values]})
    return rows


def recall(reader, examples: list, tokens_of, choices: dict, ps=(0.1, 0.2, 0.3)) -> list[dict]:
    """Per p and selector: the mean share of each example's labelled chunks (`Example.labels`) among the
    floor(p * n * L) chunks the selector expands; `tokens_of(pages)` -> (n, m, d)."""
    rows = []
    for p in ps:
        for name, selector in choices.items():
            shares = []
            for ex in examples:
                chosen = reader.select(ex.prompt, reader.chunks(tokens_of(ex.pages)), p, selector)  # (n, L)
                shares.append(sum(bool(chosen[i, j]) for i, j in ex.labels) / len(ex.labels))
            rows.append({"p": p, "selector": name, "examples": len(examples),
                         "recall": round(float(np.mean(shares)), 3),
                         "recall_se": round(float(np.std(shares) / np.sqrt(len(shares))), 3)})
    return rows


def recall_selectors(reader) -> dict:
    """The recall comparison's selectors: random, MiniLM similarity, and the reader's trained one."""
    return {"random": RandomSelector(0), "similarity": SimilaritySelector(reader.config.question_dim),
            "trained": reader.selector}


def stated_examples(data: Path, store, pages: int = 3, seed: int = 0) -> list:
    """The answerable questions of a stated-facts set (`data`/samples.json; its reports ingested into
    `store`) as labelled QA examples over their evidence pages and other pages of their report, `pages` in
    all, shuffled; a question none of whose chunks is labelled is left out."""
    return [ex for ex, _ in dev_examples(data, store, "mmlongbench", pages, seed)]


def dev_examples(data: Path, store, benchmark: str, pages: int = 3, seed: int = 0) -> list[tuple]:
    """(labelled QA example, its `Question`) for the answerable questions of a benchmark-style set
    (`data`/samples.json, its documents ingested into `store`) whose evidence pages are at most `pages`:
    over those pages and other pages of the document, `pages` in all, shuffled; a question none of whose
    chunks is labelled is left out."""
    import random

    from docrefrag.core.chunk_labels import page_labels
    from docrefrag.core.config import CHUNK_K, GRID
    from docrefrag.core.train_data import Example
    from docrefrag.evals.datasets import load_questions, mmlongbench_format

    docs = {d.name: d for d in store.catalog.documents() if d.status == "ready"}
    rng, examples = random.Random(seed), []
    for q in load_questions(benchmark, data / "samples.json"):
        doc = docs.get(q.doc_name)
        if (not q.answerable or doc is None or len(q.evidence_pages) > pages
                or not all(1 <= p <= doc.n_pages for p in q.evidence_pages)):
            continue
        others = [p for p in range(1, doc.n_pages + 1) if p not in q.evidence_pages]
        keys = [(doc.doc_id, p) for p in [*q.evidence_pages, *rng.sample(others, pages - len(q.evidence_pages))]]
        rng.shuffle(keys)
        labels = page_labels([store.pages.get(*key) for key in keys], q.question, q.answer, GRID, CHUNK_K)
        if labels:
            examples.append((Example("qa", q.question, keys, q.answer, mmlongbench_format(q), labels=labels), q))
    return examples


def dev_readings(reader, data: Path, store, benchmark: str, limit: int) -> list:
    """`reader_compare.Reading`s of `dev_examples`, scored by the benchmark's official rules."""
    from docrefrag.evals.answers import score
    from docrefrag.evals.reader_compare import Reading

    readings = []
    for ex, q in dev_examples(data, store, benchmark)[:limit]:
        tokens, regions = read_pages(reader, lambda keys: (store.pages.stacked_tokens(keys),
                                                           [store.pages.get(*k) for k in keys]), ex.pages)
        readings.append(Reading(ex, tokens, regions, lambda pred, q=q: score(q, pred)))
    return readings


def heldout_readings(reader, trainer, limit: int) -> list:
    """`reader_compare.Reading`s of the held-out documents' labelled multi-page QA draws (as `recall`)."""
    from docrefrag.evals.reader_compare import Reading

    readings = []
    for step in range(limit):
        ex = trainer.sampler.labelled_qa(step, "multi")
        readings.append(Reading(ex, trainer.tokens(ex.pages), trainer.regions(reader, ex.pages),
                                lambda pred, ex=ex: mmlongbench_score(ex.target, pred, ex.answer_format)))
    return readings


def heldout_trainer(work: Path, docs: int = 4, pages: int = 6):
    """A `Trainer` over `docs` held-out training documents (seeds from HELD_OUT_SEED, never trained on)."""
    from docrefrag.core.config import TrainConfig
    from docrefrag.core.train import Trainer
    from docrefrag.indexes.corpus import CorpusIndex

    return Trainer(TrainConfig(out=work, docs=docs, pages=pages, seed=HELD_OUT_SEED), CorpusIndex, mmlongbench_score,
                   show_progress=False)


def synthetic_sequences(out: Path, docs: int, pages: int, questions: int, noisy_pages: tuple[int, int]):
    """Held-out synthetic documents (seeds from HELD_OUT_SEED) ingested into `out`/store, and noisy
    sequences for their answerable questions."""
    from docrefrag.core.longrag import EvidenceQuestion, NoiseConfig, build_sequence
    from docrefrag.core.page_encoder import default_encoder
    from docrefrag.core.synthetic_training import training_document
    from docrefrag.indexes.hybrid import HybridSearcher
    from docrefrag.indexes.ingest import Ingestor
    from docrefrag.indexes.store import Store

    store = Store(out / "store", create=True)
    synthetic = [training_document(out / f"heldout-{i}.pdf", pages, HELD_OUT_SEED + i) for i in range(docs)]
    with Ingestor(store, show_progress=False) as ingestor:
        results = {Path(r.source).resolve(): r.doc_id for r in ingestor.ingest([d.path for d in synthetic])}
    searcher = HybridSearcher(store, default_encoder().embedder)
    qs = [EvidenceQuestion.from_fact(q, results[d.path.resolve()]) for d in synthetic for q in d.questions if q.page]
    qs = qs[:: max(1, len(qs) // questions)][:questions]
    lo, hi = noisy_pages
    return store, [build_sequence(searcher, q, NoiseConfig(m_min=lo, m_max=hi, seed=i)) for i, q in enumerate(qs)]


def single_evidence_questions(questions: list, documents: list, n: int) -> list:
    """At most `n` answerable questions with one evidence page, on a ready document that has that page (the
    dev set labels one question "page 0"), spread evenly over the question file's order."""
    ready = {d.name: d.n_pages for d in documents if d.status == "ready"}
    pool = [q for q in questions if q.answerable and len(q.evidence_pages) == 1 and q.doc_name in ready
            and 1 <= q.evidence_pages[0] <= ready[q.doc_name]]
    return pool[:: max(1, len(pool) // n)][:n]


def mmlongbench_sequences(data: Path, store_dir: Path, questions: int, noisy_pages: tuple[int, int]):
    """Dev-set questions with one evidence page, in noisy sequences over the dev store."""
    from docrefrag.core.longrag import EvidenceQuestion, NoiseConfig, build_sequence
    from docrefrag.core.page_encoder import default_encoder
    from docrefrag.evals.datasets import load_questions, mmlongbench_format
    from docrefrag.indexes.hybrid import HybridSearcher
    from docrefrag.indexes.store import Store

    store = Store(store_dir)
    documents = store.catalog.documents()
    names = {d.name: d.doc_id for d in documents if d.status == "ready"}
    pool = single_evidence_questions(load_questions("mmlongbench", data / "samples.json"), documents, questions)
    searcher = HybridSearcher(store, default_encoder().embedder)
    lo, hi = noisy_pages
    seqs = [build_sequence(searcher, EvidenceQuestion(q.question, q.answer, mmlongbench_format(q), names[q.doc_name],
                                                      tuple(q.evidence_pages)), NoiseConfig(m_min=lo, m_max=hi, seed=i))
            for i, q in enumerate(pool)]
    return store, seqs


def main(argv: list[str] | None = None) -> int:
    from docrefrag.core.page_encoder import default_encoder
    from docrefrag.core.reader import DEFAULT_CHECKPOINT, load_reader, load_words_reader

    parser = argparse.ArgumentParser(prog="python -m docrefrag.evals.reader_evals")
    parser.add_argument("what", choices=["reconstruction", "training-tasks", "selectors", "answer-loss", "recall",
                                         "compare", "full-text"])
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--words", action="store_true",
                        help="the checkpoint's selector over the agents' decoder, words compression (the reader "
                             "`ask --answerer reader` reads with), not the checkpoint's own decoder and projector")
    parser.add_argument("--mmlongbench", type=Path, default=None,
                        help="selectors on this dev-set folder (with --store)")
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--stated", type=Path, default=None,
                        help="recall on this stated-facts folder (with --store, where its reports are ingested)")
    parser.add_argument("--longdocurl", type=Path, default=None,
                        help="compare, full-text on this LongDocURL folder (samples.json; with --store)")
    parser.add_argument("--limit", type=int, default=30, help="questions (selectors, answer-loss, full-text); examples "
                                                               "per task (training-tasks); readings (recall, compare)")
    parser.add_argument("--docs", type=int, default=8, help="recall, compare: held-out documents (seeds from 90000)")
    parser.add_argument("--answers", type=int, default=16,
                        help="compare: the first N readings also scored by log-likelihood and answer accuracy")
    parser.add_argument("--answer-ps", type=float, nargs="+", default=[0.1, 0.2, 0.3],
                        help="compare: the budgets at which the answers are scored (recall: at 0.1, 0.2 and 0.3)")
    parser.add_argument("--warmstart", type=Path, default=None,
                        help="compare: the supervised-only selector from this warm-start checkpoint")
    parser.add_argument("--pages", type=int, default=3, help="full-text: the fused top pages read per question")
    parser.add_argument("--p", type=float, default=0.2, help="full-text: the reader's budget")
    parser.add_argument("--stated-text", action="store_true",
                        help="full-text: only the questions whose answer their one evidence page's text states (no "
                             "chart or figure evidence: `grpo_questions.stated_text_questions`)")
    parser.add_argument("--markdown", type=Path, default=None, help="compare, full-text: the table also to this file")
    parser.add_argument("--noisy-pages", type=int, nargs=2, default=(3, 6))
    parser.add_argument("--work", type=Path, default=Path("runs/reader-evals"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="selectors: accuracy by budget p (PNG)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    encoder = default_encoder()
    load = load_words_reader if args.words else load_reader
    reader = load(args.checkpoint, embed_question=encoder.embedder.embed_queries, encoder_id=encoder.encoder_id)
    table = None
    if args.what == "reconstruction":
        rows = reconstruction(reader)
    elif args.what in ("compare", "full-text"):
        rows, table = compare_command(args, reader) if args.what == "compare" else full_text_command(args, reader)
    elif args.what == "recall" and args.stated:
        from docrefrag.indexes.store import Store

        with Store(args.store) as store, torch.no_grad():
            examples = stated_examples(args.stated, store)[:args.limit]
            rows = recall(reader, examples, lambda keys: torch.from_numpy(store.pages.stacked_tokens(keys)),
                          recall_selectors(reader))
    elif args.what in ("training-tasks", "recall"):
        trainer = heldout_trainer(args.work / f"heldout-{args.what}", docs=args.docs if args.what == "recall" else 4)
        try:
            with torch.no_grad():
                if args.what == "training-tasks":
                    rows = training_task_reconstruction(reader, trainer, args.limit)
                else:
                    examples = [trainer.sampler.labelled_qa(step, "multi") for step in range(args.limit)]
                    rows = recall(reader, examples, trainer.tokens, recall_selectors(reader))
        finally:
            trainer.close()
    else:
        args.work.mkdir(parents=True, exist_ok=True)
        if args.mmlongbench:
            store, seqs = mmlongbench_sequences(args.mmlongbench, args.store, args.limit, tuple(args.noisy_pages))
        else:
            store, seqs = synthetic_sequences(args.work / "heldout", 6, 6, args.limit, tuple(args.noisy_pages))

        def pages_of(keys):
            return store.pages.stacked_tokens(keys), [store.pages.get(*key) for key in keys]

        with torch.no_grad():
            rows = (selectors(reader, seqs, pages_of) if args.what == "selectors"
                    else answer_loss(reader, seqs, pages_of))
        store.close()
        if args.plot and args.what == "selectors":
            accuracy_by_budget(rows, args.plot, "MMLongBench-Doc" if args.mmlongbench else "held-out synthetic")
    text = json.dumps(rows, indent=1)
    if args.json:
        args.json.write_text(text)
    if table and args.markdown:
        args.markdown.write_text(table + "\n")
    print(table or text)
    return 0


def compare_command(args, reader) -> tuple[list[dict], str]:
    """`compare` on the held-out documents, or on --stated / --longdocurl with --store."""
    from docrefrag.evals.reader_compare import checkpoint_selector, compare, compare_markdown, selector_factories

    supervised = checkpoint_selector(args.warmstart, reader) if args.warmstart else None
    factories = selector_factories(reader, supervised)
    data = args.stated or args.longdocurl
    if data:
        from docrefrag.indexes.store import Store

        with Store(args.store) as store, torch.no_grad():
            readings = dev_readings(reader, data, store, "mmlongbench" if args.stated else "longdocurl", args.limit)
        rows = compare(reader, readings, factories, answers=args.answers, answer_ps=tuple(args.answer_ps))
    else:
        trainer = heldout_trainer(args.work / "heldout-recall", docs=args.docs)
        try:
            with torch.no_grad():
                readings = heldout_readings(reader, trainer, args.limit)
            rows = compare(reader, readings, factories, answers=args.answers, answer_ps=tuple(args.answer_ps))
        finally:
            trainer.close()
    return rows, compare_markdown(rows)


def full_text_command(args, reader) -> tuple[list[dict], str]:
    """`full-text` on --stated or --longdocurl, ingested into --store."""
    from docrefrag.core.page_encoder import default_encoder
    from docrefrag.evals.answers import score
    from docrefrag.evals.datasets import load_questions
    from docrefrag.evals.reader_compare import full_text, full_text_markdown
    from docrefrag.indexes.hybrid import HybridSearcher
    from docrefrag.indexes.store import Store

    data = args.stated or args.longdocurl
    if data is None or args.store is None:
        raise SystemExit("full-text reads a question set: pass --stated DIR or --longdocurl DIR, and --store STORE")
    with Store(args.store) as store:
        doc_ids = {d.name: d.doc_id for d in store.catalog.documents() if d.status == "ready"}
        questions = [q for q in load_questions("mmlongbench" if args.stated else "longdocurl", data / "samples.json")
                     if q.doc_name in doc_ids]
        if args.stated_text:
            from docrefrag.evals.grpo_questions import stated_text_questions

            questions = [q for q, _ in stated_text_questions(store, questions)]
        questions = questions[:args.limit]
        searcher = HybridSearcher(store, default_encoder().embedder)
        rows = full_text(reader, store, searcher, questions, doc_ids, score, args.pages, args.p)
    return rows, full_text_markdown(rows)


if __name__ == "__main__":
    raise SystemExit(main())

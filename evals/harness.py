"""Benchmark runs: load questions, ingest the documents that are missing, evaluate, report."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from datetime import date
from pathlib import Path

from docrefrag.agents.planner import plan_question
from docrefrag.core.reader import DocRefragReader
from docrefrag.evals.answers import evaluate_answers, summarise
from docrefrag.evals.datasets import Benchmark, document_sources, load_questions, split_available
from docrefrag.evals.report import answers_markdown, latency_histogram, recall_curves
from docrefrag.evals.retrieval import RetrievalReport, evaluate_retrieval, markdown_table
from docrefrag.graph.context import AskConfig
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.ingest import Ingestor
from docrefrag.indexes.store import Store

logger = logging.getLogger(__name__)


def prepare(benchmark: Benchmark, data_dir: Path, store: Store, limit: int | None,
            show_progress: bool, embedder) -> tuple[list, dict[str, str], int]:
    """(questions whose document is present, benchmark doc name -> doc id, questions skipped):
    loads the questions and ingests the documents they need that the store lacks, as `docrefrag
    ingest` does (the branch health measured at the end)."""
    questions = load_questions(benchmark, data_dir)
    if limit is not None:
        questions = questions[:limit]
    sources = document_sources(data_dir)
    present, missing = split_available(questions, sources)
    needed = sorted({sources[q.doc_name] for q in present})
    with Ingestor(store, show_progress=show_progress, embedder=embedder) as ingestor:
        results = ingestor.ingest(needed)
    by_path = {r.source: r for r in results}
    doc_ids = {}
    for q in present:
        result = by_path.get(str(sources[q.doc_name].resolve()))
        if result is not None and result.doc_id and result.status != "failed":
            doc_ids[q.doc_name] = result.doc_id
    return present, doc_ids, len(missing)


def model_identity(model) -> dict | None:
    """What names a chat model or a Doc-REFRAG reader in a run's settings (None: not used)."""
    if model is None:
        return None
    if isinstance(model, DocRefragReader):
        return {"reader": model.checkpoint_id, "decoder": model.decoder_id}
    identity = model.asdict()  # a LangChain chat model: its identifying parameters and "_type"
    return {"type": identity.pop("_type"), **identity,
            "base_url": getattr(model, "openai_api_base", None)}  # an OpenAI-compatible endpoint's address


def run_settings(store: Store, config: dict | None = None, **models) -> dict:
    """A run's settings: its logs resume only under the same ones (evals.jsonl)."""
    return {"encoder": store.meta.encoder_id, "config": config, **{k: model_identity(m) for k, m in models.items()}}


def run_retrieval(benchmark: Benchmark, data_dir: Path, store: Store, embedder, out_dir: Path,
                  limit: int | None = None, show_progress: bool = True, llm=None, hyde: bool = False,
                  decompose: bool = False, reranker: str | None = None, reader=None,
                  config: AskConfig | None = None) -> RetrievalReport:
    """Retrieval-only run: each question ranks the pages of its own document (see evals.retrieval);
    with `hyde` / `decompose` the chat model `llm` plans each question first (agents.planner); with a
    `reranker` ("reader": the Doc-REFRAG `reader`; "chat": the local chat model `llm` over the pages'
    text, as much of each as the answer agent reads), its page relevance reranks the fused top pages as the ask
    graph does, as one more method. `config` (default AskConfig()) gives the gate and the characters read per page."""
    config = config or AskConfig()
    score = None
    if reranker is not None:  # before any ingest: a reranker without its model is refused at once
        from docrefrag.agents.rerank import make_reranker

        score = make_reranker(reranker, store, reader, llm, config.reading.chars_per_page)
    present, doc_ids, missing = prepare(benchmark, data_dir, store, limit, show_progress, embedder)
    searcher = HybridSearcher(store, embedder)
    planner = None
    if hyde or decompose:
        planner = lambda question: plan_question(question, llm, decompose=decompose, hyde=hyde)[0]  # noqa: E731
    rerank_setting = {None: "", "reader": "-rerank", "chat": "-rerank-chat"}[reranker]
    setting = "".join(["-hyde" if hyde else "", "-decompose" if decompose else "", rerank_setting])
    benchmark_setting = f"{benchmark}{setting}"
    chat_reranker = {"reranker_llm": llm} if reranker == "chat" else {}  # absent otherwise: earlier runs resume
    gate = {"disagreement": config.search.disagreement} if planner is not None else None  # the planner rows depend on
    settings = run_settings(store, gate, planner_llm=llm if planner is not None else None, reader=reader,
                            **chat_reranker)
    report = evaluate_retrieval(store, searcher, present, doc_ids, out_dir / f"{benchmark_setting}-retrieval.jsonl",
                                show_progress=show_progress, planner=planner, hyde=hyde, decompose=decompose,
                                reranker=score, settings=settings, disagreement=config.search.disagreement)
    report.skipped["document_missing"] += missing
    summary = {"benchmark": benchmark, "date": date.today().isoformat(), "settings": settings,
               **{k: v for k, v in asdict(report).items() if k != "latencies_ms"}}
    (out_dir / f"{benchmark_setting}-retrieval.json").write_text(json.dumps(summary, indent=2))
    plotted = report.methods if planner is None else {m: v for m, v in report.methods.items()
                                                      if m.endswith("consistency") or m == "reranked"}
    curves = recall_curves(plotted, out_dir / f"{benchmark_setting}-recall.png", f"{benchmark_setting}: page recall")
    latency = latency_histogram(report.latencies_ms, out_dir / f"{benchmark_setting}-latency.png",
                                f"{benchmark_setting}: retrieval latency per question")
    (out_dir / f"{benchmark_setting}-retrieval.md").write_text(
        f"# {benchmark_setting} retrieval ({report.questions} questions, {date.today().isoformat()})\n\n"
        + markdown_table(report) + f"\n\nSkipped: {report.skipped}\n\n"
        + f"![recall]({curves.name})\n\n![latency]({latency.name})\n")
    return report


def run_baselines(benchmark: Benchmark, data_dir: Path, store: Store, embedder, reader, out_dir: Path,
                  limit: int | None = None, show_progress: bool = True) -> str:
    """The reader behind every retrieval/reading pipeline of evals.baselines; returns the markdown table."""
    from docrefrag.evals.baselines import evaluate_baselines, summary_table

    present, doc_ids, missing = prepare(benchmark, data_dir, store, limit, show_progress, embedder)
    rows = evaluate_baselines(store, HybridSearcher(store, embedder), reader, present, doc_ids,
                              out_dir / f"{benchmark}-baselines.jsonl", show_progress=show_progress,
                              settings=run_settings(store, reader=reader))
    table = summary_table(rows)
    (out_dir / f"{benchmark}-baselines.md").write_text(
        f"# {benchmark} reader baselines ({len(rows)} questions, {date.today().isoformat()}; "
        f"skipped, document missing: {missing})\n\n{table}\n")
    return table


def run_answers(benchmark: Benchmark, data_dir: Path, store: Store, embedder, llm, out_dir: Path,
                limit: int | None = None, config: AskConfig | None = None, show_progress: bool = True,
                reader=None, extractor=None, extractor_name: str | None = None) -> dict:
    """End-to-end run through the ask graph, scored with the official rules (see evals.answers);
    with an `extractor` chat model, answers are extracted by the official protocol first. The default config
    has the experience memory off, so that a question's score does not depend on the questions before it."""
    config = config or AskConfig.of(memory=False)
    present, doc_ids, missing = prepare(benchmark, data_dir, store, limit, show_progress, embedder)
    name = f"{benchmark}{'-extract' if extractor is not None else ''}"  # rows with and without extraction differ
    settings = run_settings(store, llm=llm, reader=reader, extractor=extractor, config=config.flat())
    rows = evaluate_answers(store, HybridSearcher(store, embedder), llm, present, doc_ids,
                            out_dir / f"{name}-answers.jsonl", config, show_progress, reader, extractor, settings)
    summary = {"benchmark": benchmark, "date": date.today().isoformat(), "settings": settings,
               "skipped_document_missing": missing,
               "skipped_document_failed": sum(q.doc_name not in doc_ids for q in present),
               **summarise(benchmark, rows, extractor_name if extractor is not None else None)}
    (out_dir / f"{name}-answers.json").write_text(json.dumps(summary, indent=2, default=str))
    plot = None
    if rows:
        plot = latency_histogram([r["seconds"] * 1000 for r in rows], out_dir / f"{name}-answer-latency.png",
                                 f"{benchmark}: ask latency per question")
    (out_dir / f"{name}-answers.md").write_text(answers_markdown(json.loads(json.dumps(summary, default=str)), plot))
    return summary

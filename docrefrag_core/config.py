"""Configs of the model layer, as dataclasses with their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EncoderConfig:
    """The layout-grid page encoder (see `page_encoder.LayoutGridEncoder`)."""

    grid: int = field(default=18, metadata={"help": "cells per side; m = grid**2 tokens per page"})
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
        from docrefrag_core.page_encoder import VISUAL_FEATURES

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

    k: int = field(default=3, metadata={"help": "grid tokens per chunk (2, 3 or 6 divide the 324 tokens)"})
    p: float = field(default=0.2, metadata={"help": "fraction of all chunks expanded to their k tokens"})
    token_dim: int = field(default=412, metadata={"help": "dimension of a page token (the encoder's dim)"})
    question_dim: int = field(default=384, metadata={"help": "dimension of the question embedding"})
    hidden: int = field(default=576, metadata={"help": "the decoder's hidden size"})
    projector_hidden: int = field(default=576, metadata={"help": "hidden width of the chunk projector MLP"})
    selector_dim: int = field(default=256, metadata={"help": "width of the selector's transformer"})
    selector_heads: int = field(default=8, metadata={"help": "attention heads of the selector"})
    selector_layers: int = field(default=2, metadata={"help": "transformer layers of the selector"})
    selector_ff: int = field(default=256, metadata={"help": "feed-forward width of the selector"})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank on the decoder's attention projections"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling numerator"})
    max_new_tokens: int = field(default=24, metadata={"help": "greedy decoding bound of an answer"})

    def __post_init__(self) -> None:
        if self.k not in (1, 2, 3, 4, 6, 9, 12):
            raise ValueError(f"k={self.k} must divide the 18x18 grid's rows; use k in {{2, 3, 6}}")
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"p is a fraction of chunks in [0, 1], got {self.p}")
        if self.selector_dim % self.selector_heads:
            raise ValueError(f"selector_dim={self.selector_dim} must be a multiple of "
                             f"selector_heads={self.selector_heads}")

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

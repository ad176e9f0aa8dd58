"""The page as the model layer sees it: words with boxes, layout blocks and the rendered image.

`indexes` builds these from PDFs and page images; `docrefrag_core` encodes them. Coordinates are
PDF points with the origin at the top-left of the page (PyMuPDF's convention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

BlockKind = Literal["text", "table", "figure", "drawing"]
BLOCK_KINDS: tuple[BlockKind, ...] = ("text", "table", "figure", "drawing")


@dataclass(frozen=True)
class Word:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    block: int  # index of the text block (one contextual embedder pass per block)


@dataclass(frozen=True)
class Block:
    kind: BlockKind
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass
class PageInput:
    """Everything the page encoder reads for one page."""

    width: float
    height: float
    words: list[Word]
    blocks: list[Block]
    image: np.ndarray  # (H, W, 3) uint8 render of the whole page

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"page size must be positive, got {self.width} x {self.height}")
        if self.image.ndim != 3 or self.image.shape[2] != 3 or self.image.dtype != np.uint8:
            raise ValueError(
                f"image must be an (H, W, 3) uint8 array, got {self.image.shape} {self.image.dtype}"
            )

"""Page encoders: a page in, `m` region tokens out, in raster order.

The default `LayoutGridEncoder` is a multimodal *region* encoder built from a text embedder and
hand-designed visual features; it is not a pretrained vision-language model. The page is divided
into a `grid x grid` layout grid (18 x 18 = 324 tokens); the token of a cell is

    [ text state (text_dim) | visual features (len(VISUAL_FEATURES)) | 2-D position (pos_dim) ]

- text state: the mean contextual state of the words whose box centre falls in the cell (one
  embedder pass per text block, word-piece states pooled per word); zero for cells without words;
- visual features: from the page render resampled to `image_side` pixels (ink, darkness, mean
  colour, saturation, edge energy) and from the PDF's layers (fraction of the cell covered by text,
  table, figure/image and drawing blocks), plus the cell's word density;
- position: sinusoids of the cell's row and column centre.

Any other encoder (a Hugging Face vision tower with local weights: SigLIP, Qwen2-VL's, ColPali's)
can stand in behind `PageEncoder`, as long as it returns `m` tokens in raster order (resample its
patch grid to the layout grid with `docrefrag.core.chunking`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
from PIL import Image

from docrefrag.core.config import EncoderConfig
from docrefrag.core.page import BLOCK_KINDS, PageInput

if TYPE_CHECKING:
    from docrefrag.core.text_embedder import TextEmbedder

logger = logging.getLogger(__name__)

VISUAL_FEATURES: tuple[str, ...] = (
    "ink", "dark", "red", "green", "blue", "saturation", "edges",
    *(f"{kind}_cover" for kind in BLOCK_KINDS),
    "word_density",
)


@dataclass
class PageTokens:
    tokens: np.ndarray  # (m, dim) float32, raster order
    word_counts: np.ndarray  # (m,) int32, words per cell (0: the cell's text state is empty)


class PageEncoder(Protocol):
    encoder_id: str  # changes whenever stored tokens would change; the store refuses a mismatch
    m: int
    dim: int
    text_dim: int

    def encode(self, page: PageInput) -> PageTokens: ...


class LayoutGridEncoder:
    def __init__(self, embedder: TextEmbedder, config: EncoderConfig | None = None) -> None:
        self.config = config or EncoderConfig(text_dim=embedder.dim, max_tokens=embedder.max_tokens)
        if self.config.text_dim != embedder.dim:
            raise ValueError(
                f"config.text_dim={self.config.text_dim} but the embedder's hidden size is {embedder.dim}"
            )
        self.embedder = embedder
        self.m = self.config.m
        self.dim = self.config.dim
        self.text_dim = self.config.text_dim
        self.encoder_id = f"layoutgrid-v1-g{self.config.grid}-s{self.config.image_side}-{embedder.name}"

    def encode(self, page: PageInput) -> PageTokens:
        g = self.config.grid
        text, counts = self._text_states(page)  # (m, text_dim), (m,)
        visual = self._visual_features(page, counts)  # (m, n_visual)
        pos = grid_positions(g, self.config.pos_freqs)  # (m, pos_dim)
        tokens = np.concatenate([text, visual, pos], axis=1).astype(np.float32)  # (m, dim)
        assert tokens.shape == (self.m, self.dim)
        return PageTokens(tokens=tokens, word_counts=counts.astype(np.int32))

    def _text_states(self, page: PageInput) -> tuple[np.ndarray, np.ndarray]:
        g = self.config.grid
        sums = np.zeros((g * g, self.text_dim), dtype=np.float32)
        counts = np.zeros(g * g, dtype=np.float32)
        if not page.words:
            return sums, counts
        block_ids = sorted({w.block for w in page.words})
        index = {b: i for i, b in enumerate(block_ids)}
        grouped: list[list] = [[] for _ in block_ids]
        for w in page.words:
            grouped[index[w.block]].append(w)
        states = self.embedder.word_states([[w.text for w in ws] for ws in grouped])
        words = [w for ws in grouped for w in ws]
        word_states = np.concatenate(states, axis=0)  # (n_words, text_dim)
        cx = np.array([(w.x0 + w.x1) / 2 for w in words]) / page.width
        cy = np.array([(w.y0 + w.y1) / 2 for w in words]) / page.height
        col = np.clip((cx * g).astype(int), 0, g - 1)
        row = np.clip((cy * g).astype(int), 0, g - 1)
        cell = row * g + col  # (n_words,)
        np.add.at(sums, cell, word_states)
        np.add.at(counts, cell, 1.0)
        return sums / np.maximum(counts, 1.0)[:, None], counts

    def _visual_features(self, page: PageInput, counts: np.ndarray) -> np.ndarray:
        g, side = self.config.grid, self.config.image_side
        c = side // g
        img = Image.fromarray(page.image).resize((side, side), Image.Resampling.BOX)
        rgb = np.asarray(img, dtype=np.float32) / 255.0  # (side, side, 3)
        gray = rgb.mean(axis=2)  # (side, side)
        edges = np.zeros_like(gray)
        edges[:, 1:] += np.abs(np.diff(gray, axis=1))
        edges[1:, :] += np.abs(np.diff(gray, axis=0))

        def per_cell(x: np.ndarray) -> np.ndarray:  # (side, side) -> (m,)
            return x.reshape(g, c, g, c).mean(axis=(1, 3)).reshape(-1)

        sat = rgb.max(axis=2) - rgb.min(axis=2)
        feats = [
            per_cell(1.0 - gray),
            per_cell((gray < 0.5).astype(np.float32)),
            *(per_cell(rgb[:, :, i]) for i in range(3)),
            per_cell(sat),
            per_cell(np.minimum(edges * 4.0, 1.0)),
            *(block_coverage(page, kind, g) for kind in BLOCK_KINDS),
            np.log1p(counts) / np.log1p(50.0),
        ]
        return np.stack(feats, axis=1).astype(np.float32)  # (m, n_visual)


def default_encoder() -> LayoutGridEncoder:
    """The default page encoder over the cached all-MiniLM-L6-v2 (`docrefrag models fetch`)."""
    from docrefrag.core.text_embedder import TextEmbedder

    return LayoutGridEncoder(TextEmbedder.default())


def block_coverage(page: PageInput, kind: str, g: int) -> np.ndarray:
    """(m,) fraction of each cell covered by blocks of `kind` (overlaps summed, capped at 1)."""
    edges_x = np.linspace(0.0, page.width, g + 1)
    edges_y = np.linspace(0.0, page.height, g + 1)
    cover = np.zeros((g, g), dtype=np.float32)
    for b in page.blocks:
        if b.kind != kind:
            continue
        ox = np.clip(np.minimum(edges_x[1:], b.x1) - np.maximum(edges_x[:-1], b.x0), 0, None)  # (g,)
        oy = np.clip(np.minimum(edges_y[1:], b.y1) - np.maximum(edges_y[:-1], b.y0), 0, None)  # (g,)
        cover += np.outer(oy, ox) / ((page.width / g) * (page.height / g))  # (g rows, g cols)
    return np.minimum(cover, 1.0).reshape(-1)


def grid_positions(g: int, freqs: int) -> np.ndarray:
    """(g*g, 4*freqs) sinusoids of each cell's row and column centre in [0, 1]."""
    centre = (np.arange(g) + 0.5) / g  # (g,)
    angles = centre[:, None] * np.pi * (2.0 ** np.arange(freqs))[None, :]  # (g, freqs)
    axis = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (g, 2*freqs)
    rows = np.repeat(axis, g, axis=0)  # (m, 2*freqs): row of cell i is i // g
    cols = np.tile(axis, (g, 1))  # (m, 2*freqs): column of cell i is i % g
    return np.concatenate([rows, cols], axis=1).astype(np.float32)

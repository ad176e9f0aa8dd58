"""Chunks of the layout grid: k consecutive raster tokens form one chunk (L = m / k per page).

The retrieval vectors of a page come from the same chunks the Doc-REFRAG reader compresses, so the
visual index and the reader agree on what a region is. Measured on MMLongBench-Doc (ARCHITECTURE.md):
a page scored by its best k=3 chunk (MaxSim) beats whole-window embeddings for page retrieval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from docrefrag.core.config import CHUNK_K
from docrefrag.core.page import Word


def check_k(m: int, k: int) -> int:
    if k < 1 or m % k:
        raise ValueError(f"chunk size k={k} must divide the {m} tokens of a page; try k in {{2, 3, 6}}")
    return m // k


def split_chunks(tokens: np.ndarray, k: int) -> np.ndarray:
    """(m, d) -> (L, k, d): chunk j holds tokens j*k .. j*k+k-1 (raster order)."""
    L = check_k(tokens.shape[0], k)
    return tokens.reshape(L, k, tokens.shape[1])  # (L, k, d)


def merge_chunks(chunks: np.ndarray) -> np.ndarray:
    """(L, k, d) -> (m, d); the inverse of `split_chunks`."""
    L, k, d = chunks.shape
    return chunks.reshape(L * k, d)  # (m, d)


def retrieval_vectors(
    tokens: np.ndarray, word_counts: np.ndarray, text_dim: int, k: int = CHUNK_K
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectors of one page for the visual index.

    Returns (pooled (text_dim,), chunk vectors (n, text_dim), chunk ids (n,)): each chunk vector is
    the word-weighted mean of the text states of its k cells, L2-normalised; chunks without words
    are dropped. `pooled` is the word-weighted mean over the whole page (zero if the page has none).
    """
    text = tokens[:, :text_dim]  # (m, text_dim)
    weights = word_counts.astype(np.float32)  # (m,)
    chunk_text = split_chunks(text * weights[:, None], k).sum(axis=1)  # (L, text_dim)
    chunk_weight = split_chunks(weights[:, None], k).sum(axis=(1, 2))  # (L,)
    keep = np.flatnonzero(chunk_weight > 0)
    vectors = chunk_text[keep] / chunk_weight[keep, None]  # (n, text_dim)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    pooled = chunk_text.sum(axis=0) / max(float(weights.sum()), 1.0)  # (text_dim,)
    norm = float(np.linalg.norm(pooled))
    pooled = pooled / norm if norm > 0 else pooled
    return pooled.astype(np.float32), vectors.astype(np.float32), keep.astype(np.int32)


def chunk_box(chunk: int, k: int, grid: int, width: float, height: float) -> tuple[float, float, float, float]:
    """Page box (x0, y0, x1, y1) in points covered by chunk `chunk` of a `grid x grid` layout."""
    first, last = chunk * k, chunk * k + k - 1
    r0, r1 = first // grid, last // grid
    cw, ch = width / grid, height / grid
    if r0 == r1:
        return (first % grid) * cw, r0 * ch, (last % grid + 1) * cw, (r1 + 1) * ch
    return 0.0, r0 * ch, width, (r1 + 1) * ch  # the chunk wraps to the next row


def region_word_indices(words: Sequence[Word], width: float, height: float, grid: int, k: int) -> list[list[int]]:
    """The indices (into `words`, the page's reading order) of the words inside each of the page's
    L = grid*grid/k chunks: a word belongs to the chunk whose cell holds its box's centre."""
    L = check_k(grid * grid, k)
    regions: list[list[int]] = [[] for _ in range(L)]
    for index, w in enumerate(words):
        col = min(max(int((w.x0 + w.x1) / 2 / width * grid), 0), grid - 1)
        row = min(max(int((w.y0 + w.y1) / 2 / height * grid), 0), grid - 1)
        regions[(row * grid + col) // k].append(index)
    return regions


def region_words(words: Sequence[Word], width: float, height: float, grid: int, k: int) -> list[list[str]]:
    """The words inside each of the page's chunks, in reading order (`region_word_indices`)."""
    return [[words[i].text for i in region] for region in region_word_indices(words, width, height, grid, k)]


def chunk_band(chunk: int, k: int, grid: int) -> int:
    """The grid row of a chunk's first cell: chunks of one band cut the same lines of text."""
    return chunk * k // grid


def box_overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Fraction of box a covered by box b."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return ix * iy / max((a[2] - a[0]) * (a[3] - a[1]), 1e-9)

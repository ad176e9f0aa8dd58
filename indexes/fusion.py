"""Fusion of the sparse (BM25) and dense (visual index) page rankings.

Scores are combined per candidate page. A page missing from one branch's candidates gets that
branch's lowest normalised score (0), i.e. it is treated as ranked below every candidate there.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

FusionMethod = Literal["rrf", "sum", "sparse", "dense"]
RRF_K = 60  # the constant of Cormack et al. (2009)


def minmax(scores: np.ndarray) -> np.ndarray:
    """Scale to [0, 1]; a constant vector maps to zeros (it carries no ranking signal)."""
    if scores.size == 0:
        return scores
    lo, hi = float(scores.min()), float(scores.max())
    return (scores - lo) / (hi - lo) if hi > lo else np.zeros_like(scores)


def ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of each score (ties broken by position)."""
    order = np.argsort(-scores, kind="stable")
    out = np.empty(len(scores), dtype=np.int64)
    out[order] = np.arange(1, len(scores) + 1)
    return out


def fuse(sparse: np.ndarray, dense: np.ndarray, method: FusionMethod = "rrf") -> np.ndarray:
    """Fused score of each candidate from its two branch scores (NaN: absent from that branch)."""
    if sparse.shape != dense.shape:
        raise ValueError(f"sparse and dense scores must align, got shapes {sparse.shape} and {dense.shape}")
    s = np.where(np.isnan(sparse), -np.inf, sparse)
    d = np.where(np.isnan(dense), -np.inf, dense)
    if method == "sparse":
        return s
    if method == "dense":
        return d
    if method == "rrf":
        return (np.where(np.isfinite(s), 1.0 / (RRF_K + ranks(s)), 0.0)
                + np.where(np.isfinite(d), 1.0 / (RRF_K + ranks(d)), 0.0))
    if method == "sum":
        return _norm(s) + _norm(d)
    raise ValueError(f"unknown fusion method {method!r}; use one of rrf, sum, sparse, dense")


def _norm(x: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x)
    out = np.zeros_like(x)
    out[finite] = minmax(x[finite])
    return out

"""Page-retrieval metrics with binary relevance (a page is relevant iff it is an evidence page)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

KS = (1, 3, 5, 10)


def recall_at(ranked: Sequence[int], relevant: set[int], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant)


def precision_at(ranked: Sequence[int], relevant: set[int], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / k


def mrr_at(ranked: Sequence[int], relevant: set[int], k: int) -> float:
    return next((1.0 / i for i, p in enumerate(ranked[:k], 1) if p in relevant), 0.0)


def ndcg_at(ranked: Sequence[int], relevant: set[int], k: int) -> float:
    dcg = sum(1.0 / math.log2(i + 1) for i, p in enumerate(ranked[:k], 1) if p in relevant)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(k, len(relevant)) + 1))
    return dcg / ideal


def retrieval_metrics(ranked: Sequence[int], relevant: Sequence[int], ks: Sequence[int] = KS) -> dict[str, float]:
    """Recall/Precision/NDCG/MRR at each k for one question; `relevant` must not be empty."""
    rel = set(relevant)
    if not rel:
        raise ValueError("retrieval metrics need at least one relevant page")
    out = {}
    for k in ks:
        out[f"recall@{k}"] = recall_at(ranked, rel, k)
        out[f"precision@{k}"] = precision_at(ranked, rel, k)
        out[f"ndcg@{k}"] = ndcg_at(ranked, rel, k)
        out[f"mrr@{k}"] = mrr_at(ranked, rel, k)
    return out


def mean_metrics(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}


def bootstrap_se(x: np.ndarray, seed: int = 0, draws: int = 2000) -> float:
    """Standard error of the mean of `x` (one value per question, e.g. a paired difference of two methods)
    by resampling its entries with replacement."""
    rng = np.random.default_rng(seed)
    return float(np.std(x[rng.integers(0, len(x), (draws, len(x)))].mean(axis=1)))

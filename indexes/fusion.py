"""Fusion of the sparse (BM25) and dense (visual index) page rankings.

Scores are combined per candidate page; NaN means the page is not among that branch's candidates.

Methods: "consistency" (recommended default, below), "rrf" (reciprocal rank fusion, k = 60),
"sum" (min-max normalised sum; an absent page gets the branch's lowest normalised score, 0) and
"sparse" / "dense" (one branch alone, for comparison).

Consistency fusion
------------------
    s(i) = a * n_s(i) + (1 - a) * n_d(i) - lambda * D(i)

Normalisation. Each branch b is described over its own candidates by its median m_b, a robust
noise scale r_b (1.4826 * MAD; 1.2533 * the mean absolute deviation from the median when more than
half the candidates tie, e.g. BM25 zeros) and its top score t_b:
    n_b(i) = (x_b(i) - m_b) / (t_b - m_b)    1 at the branch's top, 0 at its typical candidate
An absent page gets the branch's lowest n_b. Anchoring at the median rather than the minimum keeps a
few very low pages (blank or cover pages of the dense branch) from squeezing the useful range.

Reliability and a. R_b = (t_b - m_b) / r_b says by how many noise units the branch's best page
stands out of its typical page (0: constant or no candidates, no signal). On MMLongBench-Doc the
median R is 5.6 for BM25 and 2.5 for the dense branch; a flat branch (uniform noise) gives about
1.4. The weight of the sparse branch for this query is
    a = a0 * R_s^gamma / (a0 * R_s^gamma + (1 - a0) * R_d^gamma)
a0 is the prior weight, gamma the strength of the adaptation (0: fixed a0). With gamma = 1 the
fused ranking equals that of a0 * z_s + (1 - a0) * z_d with robust z-scores z_b = (x_b - m_b) / r_b:
scores in noise units, so a branch whose top does not stand out of its own bulk contributes little
and the other branch decides. A branch with R = 0 gets no weight.

Disagreement. With c_b(i) = clip(n_b(i), 0, 1),
    D(i) = (1 - a) * (c_s(i) - c_d(i))+ + a * (c_d(i) - c_s(i))+
the support of page i that comes from one branch only, weighted by the weight of the branch that
does not back it: a page pushed by the weak branch alone and ignored by the reliable one gets a
high D; pages both branches rank alike get D = 0. D is in [0, 1]. Per query the diagnostics add
the share of the two top-5 lists in common and a query-level disagreement (1 - Spearman rho) / 2
of the branches' ranks over the union of their top-10 candidates: the graph can widen the search
or add a HyDE passage when these say the branches disagree.

Measurements behind the defaults (2026-11-30, 2 CPU cores, `python /tmp/fusion_measure.py`;
369 MMLongBench-Doc questions, every page of the question's document scored by our BM25 and visual
indexes; a bootstrap standard error of a difference of two methods' Recall@5 is about 0.01):

| method | R@1 | R@3 | R@5 | NDCG@5 | MRR@5 |
|---|---|---|---|---|---|
| sparse | 0.364 | 0.592 | 0.697 | 0.594 | 0.597 |
| dense | 0.331 | 0.545 | 0.647 | 0.553 | 0.561 |
| rrf | 0.397 | 0.630 | 0.713 | 0.628 | 0.639 |
| sum | 0.403 | 0.646 | 0.730 | 0.638 | 0.641 |
| consistency | TBD |

Robustness (Recall@5), one branch replaced by uniform noise plus 0.2 x its min-max scores (a
"repetitive vocabulary" branch) or by Gaussian noise plus the same weak signal:

TBD

Chosen: a0 = 0.35, gamma = 1.0, lambda = TBD.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

FusionMethod = Literal["consistency", "rrf", "sum", "sparse", "dense"]
METHODS: tuple[FusionMethod, ...] = ("consistency", "rrf", "sum", "sparse", "dense")
DEFAULT_METHOD: FusionMethod = "consistency"
RRF_K = 60  # the constant of Cormack et al. (2009)
TOP_K = 5  # the top-k lists compared by Diagnostics.top_overlap
RANK_K = 10  # the top-k lists whose union Diagnostics.query_disagreement correlates over


@dataclass(frozen=True)
class FusionConfig:
    """How the two branches are fused; the defaults were chosen by the measurements above."""

    method: FusionMethod = field(default=DEFAULT_METHOD, metadata={
        "help": "consistency (recommended), rrf, sum, or one branch alone: sparse, dense"})
    a0: float = field(default=0.35, metadata={
        "help": "prior weight of the sparse branch in (0, 1), before each branch's reliability adapts it"})
    gamma: float = field(default=1.0, metadata={
        "help": "strength of the per-query adaptation of the weight to the branches' reliabilities "
                "(0: fixed a0; 1: robust z-score fusion)"})
    lambda_: float = field(default=0.0, metadata={
        "help": "penalty on a page's disagreement D(i) in [0, 1] (0: no penalty)"})

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown fusion method {self.method!r}; use one of {', '.join(METHODS)}")
        if not 0.0 < self.a0 < 1.0:
            raise ValueError(f"a0 must be strictly between 0 and 1, got {self.a0}; "
                             "for one branch alone use method='sparse' or method='dense'")
        if not (np.isfinite(self.gamma) and self.gamma >= 0.0):
            raise ValueError(f"gamma must be a finite number >= 0, got {self.gamma}; "
                             "pass 0 for a fixed weight a0, 1 for robust z-score fusion")
        if not 0.0 <= self.lambda_ <= 1.0:
            raise ValueError(f"lambda_ must be in [0, 1], got {self.lambda_}; D(i) is in [0, 1], so a larger "
                             "penalty would outweigh both branches: pass 0 to switch the penalty off")

    @classmethod
    def help(cls) -> dict[str, str]:
        """Help text of each field (for CLI flags)."""
        return {f.name: f.metadata["help"] for f in fields(cls)}


@dataclass(frozen=True, eq=False)
class Diagnostics:
    """How far the two branches agree on one query, for the graph to act on."""

    weight_sparse: float  # a: the sparse branch's share of the fused score (0.5 for rrf and sum)
    reliability_sparse: float  # R_s: noise units by which BM25's best page stands out (0: no signal)
    reliability_dense: float  # R_d: the same for the dense branch
    disagreement: np.ndarray  # (n,) D(i) in [0, 1]: 0 where the branches agree on the page
    query_disagreement: float  # (1 - Spearman rho) / 2 over the union of the two top-10s; 0.5: unrelated
    top_overlap: float  # share of the two top-5 lists in common (0: disjoint)


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


def fuse(sparse: np.ndarray, dense: np.ndarray, method: FusionMethod = DEFAULT_METHOD, **params: float) -> np.ndarray:
    """Fused score of each candidate from its two branch scores (NaN: absent from that branch).

    `params` are FusionConfig fields (a0, gamma, lambda_) for the consistency method.
    """
    return fuse_with_diagnostics(sparse, dense, method, **params)[0]


def fuse_with_diagnostics(sparse: np.ndarray, dense: np.ndarray, method: FusionMethod = DEFAULT_METHOD,
                          **params: float) -> tuple[np.ndarray, Diagnostics]:
    """Fused scores and the branches' agreement; the diagnostics do not depend on the method."""
    cfg = FusionConfig(method=method, **params)
    sparse, dense = np.asarray(sparse, dtype=float), np.asarray(dense, dtype=float)
    if sparse.ndim != 1 or sparse.shape != dense.shape:
        raise ValueError(f"sparse and dense scores must be aligned 1-D arrays, got shapes {sparse.shape} "
                         f"and {dense.shape}")
    n_s, rel_s = _branch(sparse)
    n_d, rel_d = _branch(dense)
    a = _weight(rel_s, rel_d, cfg.a0, cfg.gamma)
    c_s, c_d = np.clip(n_s, 0.0, 1.0), np.clip(n_d, 0.0, 1.0)
    disagreement = (1.0 - a) * np.maximum(c_s - c_d, 0.0) + a * np.maximum(c_d - c_s, 0.0)  # (n,)
    s = np.where(np.isfinite(sparse), sparse, -np.inf)
    d = np.where(np.isfinite(dense), dense, -np.inf)
    if cfg.method == "consistency":
        fused = a * n_s + (1.0 - a) * n_d - cfg.lambda_ * disagreement
    elif cfg.method == "sparse":
        fused, a = s, 1.0
    elif cfg.method == "dense":
        fused, a = d, 0.0
    elif cfg.method == "rrf":
        fused, a = (np.where(np.isfinite(s), 1.0 / (RRF_K + ranks(s)), 0.0)
                    + np.where(np.isfinite(d), 1.0 / (RRF_K + ranks(d)), 0.0)), 0.5
    else:  # sum
        fused, a = _norm(s) + _norm(d), 0.5
    return fused, Diagnostics(float(a), rel_s, rel_d, disagreement, _query_disagreement(s, d), _top_overlap(s, d))


def _norm(x: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x)
    out = np.zeros_like(x)
    out[finite] = minmax(x[finite])
    return out


def _branch(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Median-anchored scores n (1 at the top, 0 at the median candidate) and the reliability R."""
    present = np.isfinite(x)
    out = np.zeros_like(x)
    v = x[present]
    if v.size == 0:
        return out, 0.0
    med, top = float(np.median(v)), float(v.max())
    scale = 1.4826 * float(np.median(np.abs(v - med)))
    if scale == 0.0:  # more than half the candidates tie (BM25: pages without a query term)
        scale = 1.2533 * float(np.mean(np.abs(v - med)))
    if top <= med or scale == 0.0:
        return out, 0.0
    out[present] = (v - med) / (top - med)
    out[~present] = out[present].min()
    return out, (top - med) / scale


def _weight(rel_s: float, rel_d: float, a0: float, gamma: float) -> float:
    """The sparse branch's weight a: the prior a0 moved toward the branch that stands out more."""
    if rel_s == 0.0 and rel_d == 0.0:
        return a0
    w_s = a0 * rel_s**gamma if rel_s > 0.0 else 0.0
    w_d = (1.0 - a0) * rel_d**gamma if rel_d > 0.0 else 0.0
    return w_s / (w_s + w_d)


def _top_overlap(s: np.ndarray, d: np.ndarray) -> float:
    """Share of the top-5 candidates of the two branches in common (-inf: absent)."""
    k = min(TOP_K, len(s))
    if k == 0:
        return 1.0
    top_s = set(np.argsort(-s, kind="stable")[:k].tolist())
    top_d = set(np.argsort(-d, kind="stable")[:k].tolist())
    return len(top_s & top_d) / k


def _query_disagreement(s: np.ndarray, d: np.ndarray) -> float:
    """(1 - Spearman rho) / 2 of the branch ranks over the union of their top-10 (-inf: ranked last)."""
    union = np.union1d(np.argsort(-s, kind="stable")[:RANK_K], np.argsort(-d, kind="stable")[:RANK_K])
    r_s, r_d = _ranks_absent_tied(s)[union], _ranks_absent_tied(d)[union]  # (u,), (u,)
    if len(union) < 2 or r_s.std() == 0.0 or r_d.std() == 0.0:
        return 0.0
    rho = float(np.corrcoef(r_s, r_d)[0, 1])
    return (1.0 - rho) / 2.0


def _ranks_absent_tied(x: np.ndarray) -> np.ndarray:
    """ranks() with the absent candidates (-inf) sharing their mean rank, below every present one."""
    r = ranks(x).astype(float)
    absent = ~np.isfinite(x)
    if absent.any():
        r[absent] = r[absent].mean()
    return r

"""Fusion of the sparse (BM25) and dense (visual index) page rankings.

Scores are combined per candidate page; NaN means the page is not among that branch's candidates.
Methods: "consistency" (the default), and for comparison "rrf" (reciprocal rank fusion, k = 60),
"sum" (min-max normalised sum) and "sparse" / "dense" (one branch alone).

Consistency fusion: s(i) = a * n_s(i) + (1 - a) * n_d(i) - lambda * D(i), where n_b is each branch's
score scaled between its median (0) and its top (1). The weight a moves, in log-odds, from the prior a0
by four signals of which branch carries evidence for this query:
- R_b, how many robust noise units the branch's best page stands out of its bulk;
- the query disagreement Q (Spearman of the two rankings), which sharpens that shift;
- the smoothness S_b of each branch's ranks along consecutive pages (sections span pages, noise does not);
- the branch health per document (indexes/health.py): a branch far below the other is switched off there.
D, the support of a page from one branch only, is exposed in Diagnostics; lambda = 0 (the penalty never
helped). Why it is the default (with one branch replaced by noise, the plain sum loses up to 0.24 to the
best branch and this method nothing), the formulas, grids and stress tables: docs/decisions/fusion.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

FusionMethod = Literal["consistency", "rrf", "sum", "sparse", "dense"]
METHODS: tuple[FusionMethod, ...] = ("consistency", "rrf", "sum", "sparse", "dense")
DEFAULT_METHOD: FusionMethod = "consistency"
RRF_K = 60  # the constant of Cormack et al. (2009)
TOP_K = 5  # the top-k lists compared by Diagnostics.top_overlap
AGREE = 0.25  # Q of two informative branches (Spearman 0.5): kappa sharpens the weight above it, fully at Q = 0.5
# The plan's LLM parts (HyDE, sub-queries) in mode "disagreement" are written only when the question's own
# search finds the branches' rankings uncorrelated or opposed: query disagreement Q = (1 - Spearman rho) / 2
# at or above this (the measurements behind 0.5: docs/decisions/planner.md; agents.planner.disagrees).
DISAGREEMENT = 0.5
MIN_PAIRS = 3  # fewer pairs of consecutive candidate pages than this: no smoothness evidence


@dataclass(frozen=True)
class FusionConfig:
    """How the two branches are fused; the defaults were chosen by the measurements in the module docstring."""

    method: FusionMethod = field(default=DEFAULT_METHOD, metadata={
        "help": "consistency (recommended), rrf, sum, or one branch alone: sparse, dense"})
    a0: float = field(default=0.45, metadata={
        "help": "prior weight of the sparse branch in (0, 1), before each branch's reliability adapts it"})
    gamma: float = field(default=1.0, metadata={
        "help": "strength of the per-query adaptation of the weight to the branches' reliabilities "
                "(0: fixed a0; 1: robust z-score fusion)"})
    kappa: float = field(default=2.0, metadata={
        "help": "extra strength of the adaptation when the branches' rankings disagree (0: none)"})
    eta: float = field(default=0.75, metadata={
        "help": "weight of the branches' smoothness along the document (how much more a branch's scores of "
                "consecutive pages agree than the other's) in the weight a (0: none; needs the pages' keys)"})
    health_ratio: float = field(default=0.5, metadata={
        "help": "switch a branch off on a document where its health (indexes/health.py) is below this share of "
                "the other branch's (0: never)"})
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
        if not (np.isfinite(self.kappa) and self.kappa >= 0.0):
            raise ValueError(f"kappa must be a finite number >= 0, got {self.kappa}; "
                             "pass 0 to adapt the weight without regard to the branches' disagreement")
        if not (np.isfinite(self.eta) and self.eta >= 0.0):
            raise ValueError(f"eta must be a finite number >= 0, got {self.eta}; "
                             "pass 0 to ignore how smoothly each branch scores consecutive pages")
        if not 0.0 <= self.health_ratio <= 1.0:
            raise ValueError(f"health_ratio must be in [0, 1], got {self.health_ratio}; pass 0 to never switch a "
                             "branch off by its health")
        if not 0.0 <= self.lambda_ <= 1.0:
            raise ValueError(f"lambda_ must be in [0, 1], got {self.lambda_}; D(i) is in [0, 1], so a larger "
                             "penalty would outweigh both branches: pass 0 to switch the penalty off")


@dataclass(frozen=True, eq=False)
class Diagnostics:
    """How far the two branches agree on one query, for the graph to act on."""

    weight_sparse: float  # a: the sparse branch's share of the fused score (0.5 for rrf and sum)
    reliability_sparse: float  # R_s: noise units by which BM25's best page stands out (0: no signal)
    reliability_dense: float  # R_d: the same for the dense branch
    disagreement: np.ndarray  # (n,) D(i) in [0, 1]: 0 where the branches agree on the page
    # Q = (1 - Spearman rho) / 2 over the candidates; 0.5: unrelated or a flat branch; 1: opposite
    query_disagreement: float
    smoothness_sparse: float  # S_s: rank correlation of BM25's scores of consecutive candidate pages (~0: noise-like)
    smoothness_dense: float  # S_d: the same for the dense branch
    page_pairs: int  # pairs of consecutive candidate pages behind S_s and S_d (0: no pages given)
    top_overlap: float  # share of the two top-5 lists in common (0: disjoint)
    sparse_off: int = 0  # candidates whose document switched BM25 off (its health: indexes/health.py)
    dense_off: int = 0  # candidates whose document switched the dense branch off


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


def fuse(sparse: np.ndarray, dense: np.ndarray, method: FusionMethod = DEFAULT_METHOD,
         pages: Sequence[tuple[str, int]] | None = None, health: np.ndarray | None = None,
         **params: float) -> np.ndarray:
    """Fused score of each candidate from its two branch scores (NaN: absent from that branch).

    `pages` are the candidates' (doc_id, page) keys, aligned with the scores: with them the consistency
    method also weighs how smoothly each branch scores consecutive pages. `health` (n, 2) is the sparse
    and dense branch's health on each candidate's document (indexes/health.py; NaN: unknown): the
    consistency method switches a branch off where it is far below the other's. `params` are
    FusionConfig fields (a0, gamma, kappa, eta, health_ratio, lambda_) for the consistency method.
    """
    return fuse_with_diagnostics(sparse, dense, method, pages, health, **params)[0]


def fuse_with_diagnostics(sparse: np.ndarray, dense: np.ndarray, method: FusionMethod = DEFAULT_METHOD,
                          pages: Sequence[tuple[str, int]] | None = None, health: np.ndarray | None = None,
                          **params: float) -> tuple[np.ndarray, Diagnostics]:
    """Fused scores and the branches' agreement; apart from weight_sparse (the method's own share of the
    sparse branch) the diagnostics are the consistency method's, whichever method ranks."""
    cfg = FusionConfig(method=method, **params)
    sparse, dense = np.asarray(sparse, dtype=float), np.asarray(dense, dtype=float)
    if sparse.ndim != 1 or sparse.shape != dense.shape:
        raise ValueError(f"sparse and dense scores must be aligned 1-D arrays, got shapes {sparse.shape} "
                         f"and {dense.shape}")
    if pages is not None and len(pages) != len(sparse):
        raise ValueError(f"pages must give one (doc_id, page) key per candidate: got {len(pages)} keys for "
                         f"{len(sparse)} candidates")
    if pages is not None and len(set(pages)) != len(pages):
        raise ValueError(f"pages must name each candidate once: {len(pages) - len(set(pages))} duplicate "
                         "(doc_id, page) keys; merge a page's scores into one candidate first")
    if health is not None and np.shape(health) != (len(sparse), 2):
        raise ValueError(f"health must give (sparse, dense) per candidate, shape ({len(sparse)}, 2); got "
                         f"{np.shape(health)}")
    raw_s = np.where(np.isfinite(sparse), sparse, -np.inf)  # what the comparison methods rank
    raw_d = np.where(np.isfinite(dense), dense, -np.inf)
    sparse_off, dense_off = _switched_off(health, cfg.health_ratio, len(sparse))
    sparse, dense = np.where(sparse_off, np.nan, sparse), np.where(dense_off, np.nan, dense)  # no evidence there
    n_s, rel_s = _branch(sparse)
    n_d, rel_d = _branch(dense)
    s = np.where(np.isfinite(sparse), sparse, -np.inf)
    d = np.where(np.isfinite(dense), dense, -np.inf)
    query_disagreement = _query_disagreement(s, d)
    exponent = cfg.gamma + cfg.kappa * float(np.clip((query_disagreement - AGREE) / AGREE, 0.0, 1.0))
    pairs = _consecutive(pages) if pages is not None else np.zeros((0, 2), dtype=np.int64)
    smooth_s, smooth_d = _smoothness(s, pairs), _smoothness(d, pairs)
    a = _weight(rel_s, rel_d, cfg.a0, exponent, cfg.eta * (smooth_s - smooth_d) * np.sqrt(len(pairs)))
    c_s, c_d = np.clip(n_s, 0.0, 1.0), np.clip(n_d, 0.0, 1.0)
    disagreement = (1.0 - a) * np.maximum(c_s - c_d, 0.0) + a * np.maximum(c_d - c_s, 0.0)  # (n,)
    if cfg.method == "consistency":
        fused = a * n_s + (1.0 - a) * n_d - cfg.lambda_ * disagreement
    elif cfg.method == "sparse":
        fused, a = raw_s, 1.0
    elif cfg.method == "dense":
        fused, a = raw_d, 0.0
    elif cfg.method == "rrf":
        fused, a = (np.where(np.isfinite(raw_s), 1.0 / (RRF_K + ranks(raw_s)), 0.0)
                    + np.where(np.isfinite(raw_d), 1.0 / (RRF_K + ranks(raw_d)), 0.0)), 0.5
    else:  # sum
        fused, a = _norm(raw_s) + _norm(raw_d), 0.5
    return fused, Diagnostics(float(a), rel_s, rel_d, disagreement, query_disagreement, smooth_s, smooth_d,
                              len(pairs), _top_overlap(raw_s, raw_d), int(sparse_off.sum()), int(dense_off.sum()))


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


def _weight(rel_s: float, rel_d: float, a0: float, exponent: float, smoothness: float) -> float:
    """The sparse branch's weight a: the prior a0 moved toward the branch that stands out more and, by
    the log-odds `smoothness`, toward the one that scores consecutive pages more alike."""
    if rel_s == 0.0 or rel_d == 0.0:
        return a0 if rel_s == rel_d else float(rel_s > 0.0)
    logit = np.log(a0 / (1.0 - a0)) + exponent * np.log(rel_s / rel_d) + smoothness
    return float(0.5 * (1.0 + np.tanh(logit / 2.0)))  # the logistic function, without overflow


def _switched_off(health: np.ndarray | None, ratio: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n,) masks of the candidates whose document switches the sparse / the dense branch off: its health
    below `ratio` times the other's, which must show some skill (> 0); NaN (unknown) switches nothing."""
    if health is None or ratio == 0.0:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    h_s, h_d = np.asarray(health, dtype=float).T  # (n,), (n,)
    return (h_d > 0.0) & (h_s < ratio * h_d), (h_s > 0.0) & (h_d < ratio * h_s)


def _top_overlap(s: np.ndarray, d: np.ndarray) -> float:
    """Share of the top-5 candidates of the two branches in common (-inf: absent)."""
    k = min(TOP_K, len(s))
    if k == 0:
        return 1.0
    top_s = set(np.argsort(-s, kind="stable")[:k].tolist())
    top_d = set(np.argsort(-d, kind="stable")[:k].tolist())
    return len(top_s & top_d) / k


def _query_disagreement(s: np.ndarray, d: np.ndarray) -> float:
    """(1 - Spearman rho) / 2 of the two branches' ranks over all candidates (-inf: tied last); 0.5
    (no evidence that they agree) when one branch ranks nothing, e.g. no query term in any page."""
    if len(s) < 2:
        return 0.0
    if np.unique(s).size == 1 or np.unique(d).size == 1:
        return 0.5
    r_s, r_d = _ranks_absent_tied(s), _ranks_absent_tied(d)  # (n,), (n,)
    return (1.0 - float(np.corrcoef(r_s, r_d)[0, 1])) / 2.0


def _consecutive(pages: Sequence[tuple[str, int]]) -> np.ndarray:
    """(n_pairs, 2) candidate indices (i, j) where j is the page after i in the same document."""
    where = {(doc, page): i for i, (doc, page) in enumerate(pages)}
    pairs = [(i, where[(doc, page + 1)]) for i, (doc, page) in enumerate(pages) if (doc, page + 1) in where]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def _smoothness(x: np.ndarray, pairs: np.ndarray) -> float:
    """Pearson correlation of the branch's ranks (ties averaged, absent candidates tied last) of
    consecutive pages; 0 with fewer than MIN_PAIRS pairs or a constant side (no evidence either way)."""
    if len(pairs) < MIN_PAIRS:
        return 0.0
    r = _average_ranks(x)  # (n,) -inf (absent) ties last
    first, second = r[pairs[:, 0]], r[pairs[:, 1]]  # (n_pairs,), (n_pairs,)
    if first.std() == 0.0 or second.std() == 0.0:
        return 0.0
    return float(np.corrcoef(first, second)[0, 1])


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of `x`, ascending, ties given their mean rank (scipy.stats.rankdata, whose import
    alone costs a CLI call over a second)."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)  # (u,) the last 1-based rank of each distinct value
    return ((ends - counts + 1 + ends) / 2.0)[inverse]


def _ranks_absent_tied(x: np.ndarray) -> np.ndarray:
    """ranks() with the absent candidates (-inf) sharing their mean rank, below every present one."""
    r = ranks(x).astype(float)
    absent = ~np.isfinite(x)
    if absent.any():
        r[absent] = r[absent].mean()
    return r

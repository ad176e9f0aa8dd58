"""Behaviour of indexes.fusion on hand-made score arrays: consistency fusion, its diagnostics, its
config validation, and the comparison methods (rrf, sum, sparse, dense) unchanged.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from docrefrag.indexes.fusion import RRF_K, Diagnostics, FusionConfig, fuse, fuse_with_diagnostics, minmax, ranks

NAN = np.nan


def order(scores: np.ndarray) -> list[int]:
    return np.argsort(-scores, kind="stable").tolist()


def informative(n: int, top: int, rng: np.random.Generator) -> np.ndarray:
    """A branch that singles out `top`: a noisy bulk and one page far above it."""
    x = rng.normal(0.0, 1.0, n)
    x[top] = x.max() + 6.0
    return x


def test_page_both_branches_rank_first_wins() -> None:
    sparse = np.array([2.0, 9.0, 4.0, 1.0, 0.5, 3.0])
    dense = np.array([0.41, 0.83, 0.62, 0.40, 0.45, 0.58])
    for method in ("consistency", "rrf", "sum"):
        assert order(fuse(sparse, dense, method))[0] == 1, method


def test_default_method_is_consistency() -> None:
    rng = np.random.default_rng(0)
    sparse, dense = rng.normal(size=12), rng.normal(size=12)
    np.testing.assert_array_equal(fuse(sparse, dense), fuse(sparse, dense, "consistency"))
    assert FusionConfig().method == "consistency"


def test_nan_is_absent_from_that_branch() -> None:
    # page 3 is only a dense candidate, page 4 only a sparse one
    sparse = np.array([5.0, 3.0, 1.0, NAN, 4.0])
    dense = np.array([0.9, 0.5, 0.3, 0.95, NAN])
    for method in ("consistency", "rrf", "sum"):
        fused, diag = fuse_with_diagnostics(sparse, dense, method)
        assert np.isfinite(fused).all(), method
        assert np.isfinite(diag.disagreement).all() and np.isfinite(diag.query_disagreement)
        assert order(fused)[0] == 0, method  # first in both branches
    # an absent page counts as the branch's lowest candidate: page 3 is the dense top but sparse-less
    _, diag = fuse_with_diagnostics(sparse, dense)
    assert diag.disagreement[3] > diag.disagreement[0]


def test_branch_with_no_candidates_gets_no_weight() -> None:
    dense = np.array([0.2, 0.9, 0.4, 0.3])
    fused, diag = fuse_with_diagnostics(np.full(4, NAN), dense)
    assert diag.weight_sparse == 0.0 and diag.reliability_sparse == 0.0
    assert diag.query_disagreement == 0.5  # nothing to agree with: the graph adds HyDE for the dense branch
    assert fuse_with_diagnostics(np.zeros(4), dense)[1].query_disagreement == 0.5  # no query term on any page
    assert order(fused) == order(dense)


@pytest.mark.parametrize("flat", ["constant", "uniform_noise"])
def test_uninformative_branch_hands_the_ranking_to_the_other(flat: str) -> None:
    rng = np.random.default_rng(1)
    n = 40
    good = informative(n, top=7, rng=rng)
    good[12], good[20] = good[7] - 2.5, good[7] - 5.0  # two runners-up, clear of the bulk
    bad = np.full(n, 3.0) if flat == "constant" else rng.uniform(0.0, 1.0, n)
    fused, diag = fuse_with_diagnostics(bad, good)  # BM25 flat, dense informative
    assert diag.weight_sparse < 0.1
    assert diag.reliability_sparse < 2.0 < 8.0 < diag.reliability_dense
    assert order(fused)[:3] == order(good)[:3]
    fused, diag = fuse_with_diagnostics(good, bad)  # and the other way round
    assert diag.weight_sparse > 0.8
    assert order(fused)[0] == 7
    if flat == "constant":  # no signal at all: the other branch's ranking, exactly
        assert fuse_with_diagnostics(bad, good)[1].weight_sparse == 0.0 and diag.weight_sparse == 1.0
        assert order(fuse(bad, good)) == order(good) == order(fuse(good, bad))


def test_fixed_sum_collapses_where_consistency_follows_the_informative_branch() -> None:
    """Many queries: BM25 is uniform noise plus a weak signal, the dense branch finds the page."""
    rng = np.random.default_rng(2)
    hits = {"consistency": 0, "sum": 0}
    for _ in range(200):
        n, rel = 30, int(rng.integers(30))
        dense = informative(n, rel, rng)
        dense[rel] -= 4.5  # still first, but only ~2 noise units above the runner-up
        sparse = rng.uniform(size=n)
        sparse[rel] += 0.1
        for method in hits:
            hits[method] += rel in order(fuse(sparse, dense, method))[:1]
    assert hits["consistency"] >= 190
    assert hits["sum"] < hits["consistency"] - 30


def test_disagreement_high_where_branches_disagree_and_zero_where_they_agree() -> None:
    # pages 0-1: both branches put them high; page 2: only BM25; page 3: only dense; 4-9: both low
    sparse = np.array([10.0, 8.0, 9.5, 1.0, 1.0, 1.2, 0.8, 1.1, 0.9, 1.0])
    dense = np.array([0.90, 0.85, 0.30, 0.88, 0.31, 0.30, 0.29, 0.32, 0.30, 0.31])
    _, diag = fuse_with_diagnostics(sparse, dense)
    d = diag.disagreement
    assert d.shape == sparse.shape and (d >= 0).all() and (d <= 1).all()
    assert d[2] > 0.3 and d[3] > 0.3
    assert max(d[0], d[1]) < 0.1
    assert d[4:].max() < 0.1


def test_query_level_diagnostics() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=30)
    _, same = fuse_with_diagnostics(x, 2.0 * x + 1.0)  # same ranking, other scale
    assert same.top_overlap == 1.0 and same.query_disagreement == pytest.approx(0.0)
    _, opposite = fuse_with_diagnostics(x, -x)
    assert opposite.top_overlap == 0.0 and opposite.query_disagreement == pytest.approx(1.0)
    _, diag = fuse_with_diagnostics(x[:3], x[:3])  # fewer candidates than the top-5
    assert diag.top_overlap == 1.0


def test_gamma_zero_is_a_fixed_weight_and_gamma_one_is_robust_z_fusion() -> None:
    """Without the disagreement term (kappa = 0)."""
    rng = np.random.default_rng(4)
    sparse, dense = rng.exponential(size=25), rng.normal(size=25)
    _, diag = fuse_with_diagnostics(sparse, dense, a0=0.3, gamma=0.0, kappa=0.0)
    assert diag.weight_sparse == pytest.approx(0.3)

    def robust_z(x: np.ndarray) -> np.ndarray:
        med = np.median(x)
        return (x - med) / (1.4826 * np.median(np.abs(x - med)))

    fused = fuse(sparse, dense, a0=0.3, gamma=1.0, kappa=0.0, lambda_=0.0)
    assert order(fused) == order(0.3 * robust_z(sparse) + 0.7 * robust_z(dense))


def test_disagreement_sharpens_the_shift_toward_the_branch_that_stands_out() -> None:
    rng = np.random.default_rng(5)
    dense = informative(30, top=4, rng=rng)
    agreeing = dense + rng.normal(0.0, 0.7, 30)  # a flatter BM25 that ranks the pages alike
    agreeing[4] = np.median(agreeing) + 2.0
    unrelated = rng.permutation(agreeing)  # the same scores on other pages
    _, agree = fuse_with_diagnostics(agreeing, dense)
    _, unrel = fuse_with_diagnostics(unrelated, dense)
    assert agree.reliability_sparse == pytest.approx(unrel.reliability_sparse)
    assert agree.query_disagreement < 0.25 < 0.45 < unrel.query_disagreement
    assert unrel.weight_sparse < agree.weight_sparse
    _, off = fuse_with_diagnostics(unrelated, dense, kappa=0.0)
    assert off.weight_sparse == pytest.approx(fuse_with_diagnostics(agreeing, dense, kappa=0.0)[1].weight_sparse)


def smooth_profile(n: int, top: int, rng: np.random.Generator) -> np.ndarray:
    """A branch whose scores follow the document's sections: consecutive pages score alike."""
    x = np.convolve(rng.normal(0.0, 1.0, n + 6), np.ones(7) / 7.0, mode="valid")  # (n,) a moving average
    x[top] = x.max() + 1.5
    return x


def test_smoothness_along_the_document_shifts_the_weight_to_the_smooth_branch() -> None:
    """Two branches that stand out alike and disagree: the one whose scores of consecutive pages agree
    (as a retriever's do, sections spanning pages) gets the weight; i.i.d. noise does not."""
    rng = np.random.default_rng(6)
    n = 60
    pages = [("doc", p) for p in range(1, n + 1)]
    smooth = smooth_profile(n, top=10, rng=rng)
    noise = rng.permutation(smooth)  # the same scores, hence the same reliability, on shuffled pages
    _, blind = fuse_with_diagnostics(noise, smooth)
    assert blind.page_pairs == 0 and blind.smoothness_sparse == blind.smoothness_dense == 0.0
    fused, diag = fuse_with_diagnostics(noise, smooth, pages=pages)
    assert diag.page_pairs == n - 1
    assert diag.smoothness_dense > 0.6 and abs(diag.smoothness_sparse) < 0.3
    assert diag.reliability_sparse == pytest.approx(diag.reliability_dense)
    assert diag.weight_sparse < blind.weight_sparse and diag.weight_sparse < 0.05
    assert order(fused)[0] == 10
    _, mirrored = fuse_with_diagnostics(smooth, noise, pages=pages)  # the same with the branches swapped
    assert mirrored.weight_sparse > 0.95 and order(fuse(smooth, noise, pages=pages))[0] == 10
    _, off = fuse_with_diagnostics(noise, smooth, pages=pages, eta=0.0)
    assert off.weight_sparse == pytest.approx(blind.weight_sparse)


def test_smoothness_pairs_only_consecutive_pages_of_one_document() -> None:
    rng = np.random.default_rng(7)
    pages = [("a", 1), ("a", 2), ("a", 4), ("b", 3), ("a", 3), ("b", 5), ("b", 4)]  # any order
    _, diag = fuse_with_diagnostics(rng.normal(size=7), rng.normal(size=7), pages=pages)
    assert diag.page_pairs == 5  # a1-a2, a2-a3, a3-a4, b3-b4, b4-b5; not a4-b5 nor a2-b3
    _, few = fuse_with_diagnostics(rng.normal(size=3), rng.normal(size=3), pages=[("a", 1), ("a", 2), ("b", 1)])
    assert few.page_pairs == 1 and few.smoothness_sparse == few.smoothness_dense == 0.0  # too few to judge
    with pytest.raises(ValueError, match="one \\(doc_id, page\\) key per candidate: got 2 keys for 3"):
        fuse(np.ones(3), np.ones(3), pages=[("a", 1), ("a", 2)])
    with pytest.raises(ValueError, match="1 duplicate"):
        fuse(np.ones(3), np.ones(3), pages=[("a", 1), ("a", 2), ("a", 1)])


def test_penalty_lowers_pages_backed_by_one_branch_only() -> None:
    sparse = np.array([10.0, 9.0, 1.0, 1.1, 0.9, 1.0, 1.2, 0.8])
    dense = np.array([0.9, 0.3, 0.85, 0.31, 0.30, 0.29, 0.32, 0.30])
    plain = fuse(sparse, dense, lambda_=0.0)
    penalised = fuse(sparse, dense, lambda_=0.5)
    assert penalised[0] == pytest.approx(plain[0])  # both branches back page 0: no penalty
    assert penalised[1] < plain[1] and penalised[2] < plain[2]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"a0": 0.0}, "method='sparse' or method='dense'"),
    ({"a0": 1.2}, "strictly between 0 and 1"),
    ({"gamma": -1.0}, "pass 0 for a fixed weight"),
    ({"gamma": float("inf")}, "finite"),
    ({"kappa": -2.0}, "pass 0 to adapt the weight without regard"),
    ({"eta": -0.5}, "pass 0 to ignore how smoothly"),
    ({"eta": float("nan")}, "finite"),
    ({"health_ratio": 1.5}, "pass 0 to never switch a branch off"),
    ({"health_ratio": float("nan")}, "health_ratio must be in [0, 1]"),
    ({"lambda_": 1.5}, "pass 0 to switch the penalty off"),
    ({"lambda_": -0.1}, "in [0, 1]"),
    ({"method": "max"}, "use one of consistency, rrf, sum, sparse, dense"),
])
def test_config_validation_says_how_to_fix(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        FusionConfig(**kwargs)
    with pytest.raises(ValueError):
        fuse(np.ones(3), np.ones(3), **kwargs)


def test_config_fields_have_help() -> None:
    assert {f.name: bool(f.metadata.get("help")) for f in fields(FusionConfig)} == dict.fromkeys(
        ["method", "a0", "gamma", "kappa", "eta", "health_ratio", "lambda_"], True)


def test_misaligned_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="aligned 1-D arrays"):
        fuse(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="aligned 1-D arrays"):
        fuse(np.ones((2, 2)), np.ones((2, 2)))


def test_empty_candidates() -> None:
    fused, diag = fuse_with_diagnostics(np.zeros(0), np.zeros(0))
    assert fused.shape == (0,) and diag.disagreement.shape == (0,)
    assert isinstance(diag, Diagnostics)


def test_comparison_methods_unchanged() -> None:
    sparse = np.array([3.0, NAN, 1.0, 2.0, 5.0])
    dense = np.array([0.2, 0.9, NAN, 0.4, 0.1])
    np.testing.assert_array_equal(fuse(sparse, dense, "sparse"), [3.0, -np.inf, 1.0, 2.0, 5.0])
    np.testing.assert_array_equal(fuse(sparse, dense, "dense"), [0.2, 0.9, -np.inf, 0.4, 0.1])
    s, d = np.array([3.0, -np.inf, 1.0, 2.0, 5.0]), np.array([0.2, 0.9, -np.inf, 0.4, 0.1])
    rrf = (np.where(np.isfinite(s), 1.0 / (RRF_K + ranks(s)), 0.0)
           + np.where(np.isfinite(d), 1.0 / (RRF_K + ranks(d)), 0.0))
    np.testing.assert_allclose(fuse(sparse, dense, "rrf"), rrf)
    assert fuse(sparse, dense, "rrf")[4] == pytest.approx(1 / 61 + 1 / 64)
    np.testing.assert_allclose(fuse(sparse, dense, "sum"), [0.5 + 0.125, 1.0, 0.0, 0.25 + 0.375, 1.0])
    for method, weight in [("sparse", 1.0), ("dense", 0.0), ("rrf", 0.5), ("sum", 0.5)]:
        assert fuse_with_diagnostics(sparse, dense, method)[1].weight_sparse == weight


def test_minmax_and_ranks() -> None:
    np.testing.assert_allclose(minmax(np.array([2.0, 4.0, 3.0])), [0.0, 1.0, 0.5])
    np.testing.assert_array_equal(minmax(np.array([7.0, 7.0])), [0.0, 0.0])
    np.testing.assert_array_equal(ranks(np.array([0.1, 0.9, 0.5, 0.9])), [4, 1, 3, 2])


def test_average_ranks_are_scipys_rankdata():
    from scipy.stats import rankdata

    from docrefrag.indexes.fusion import _average_ranks

    rng = np.random.default_rng(0)
    assert _average_ranks(np.array([3.0, -np.inf, 1.0, 3.0, -np.inf])).tolist() == [4.5, 1.5, 3.0, 4.5, 1.5]
    for _ in range(100):
        x = rng.integers(0, 5, size=int(rng.integers(1, 30))).astype(float)
        x[rng.random(len(x)) < 0.2] = -np.inf
        assert np.allclose(_average_ranks(x), rankdata(x))

"""The fusion stress bench (evals/bench_fusion.py): noise cases, bootstrap errors and the health gate."""

import json

import numpy as np
import pytest


def test_fusion_stress_bench_reports_every_case_and_the_worst_margin(tmp_path):
    """docrefrag.evals.bench_fusion on a hand-made dump: BM25 finds each question's page, the dense branch does not."""
    from docrefrag.evals.bench_fusion import METHODS, stress

    rng = np.random.default_rng(0)
    dump = tmp_path / "dump.jsonl"
    with open(dump, "w") as f:
        for i in range(6):
            pages = list(range(1, 31))
            sparse = rng.uniform(0.0, 1.0, 30)
            sparse[i] = 9.0
            f.write(json.dumps({"qid": str(i), "doc": "report.pdf", "evidence": [i + 1], "pages": pages,
                                "sparse": sparse.tolist(), "dense": rng.normal(size=30).tolist()}) + "\n")
    lines = stress(dump, seeds=1, params={}, n=50).splitlines()
    assert lines[0] == "| case | " + " | ".join(METHODS) + " |"
    rows = {line.split(" | ")[0].lstrip("| "): line.strip("| ").split(" | ")[1:] for line in lines[2:]}
    assert list(rows) == ["dev", "sparse U", "sparse G", "dense U", "dense G",
                          "worst margin to the best branch (noise cases)",
                          "its standard error (bootstrap over questions)"]
    col = {m: i for i, m in enumerate(METHODS)}
    assert rows["dev"][col["sparse"]] == "1.000"  # BM25 alone puts every evidence page first
    assert float(rows["dev"][col["consistency"]]) == 1.0 > float(rows["dev"][col["rrf"]])  # RRF: diluted by the noise
    assert float(rows["sparse U"][col["sparse"]]) < 0.5 and rows["dense U"][col["sparse"]] == "1.000"
    worst = [float(x) for x in rows["worst margin to the best branch (noise cases)"]]
    noise = [[float(x) for x in rows[c]] for c in ("sparse U", "sparse G", "dense U", "dense G")]
    expected = [min(r[i] - max(r[col["sparse"]], r[col["dense"]]) for r in noise) for i in range(len(METHODS))]
    assert worst == pytest.approx(expected, abs=1.5e-3)  # the printed values are rounded to 3 places
    se = [float(x) for x in rows["its standard error (bootstrap over questions)"]]
    # the dense branch's worst case is "dense U": it misses all 6 pages BM25 puts first, a margin of -1 on
    # every question, so no spread; BM25's ("sparse U") differs from the dense branch's question by question
    assert worst[col["dense"]] == -1.0 and se[col["dense"]] == 0.0
    assert se[col["sparse"]] > 0.1 and all(x >= 0.0 for x in se)


def test_bootstrap_standard_error_of_a_mean():
    from docrefrag.evals.metrics import bootstrap_se

    assert bootstrap_se(np.full(50, 0.3)) == pytest.approx(0.0, abs=1e-12)
    x = np.random.default_rng(1).normal(size=400)
    assert bootstrap_se(x) == pytest.approx(x.std() / np.sqrt(len(x)), rel=0.1)


def test_fusion_stress_bench_keeps_the_documents_asked_for(tmp_path):
    """--docs TEXT: only the questions on documents whose name contains TEXT; none left is an error."""
    from docrefrag.evals.bench_fusion import METHODS, stress

    dump = tmp_path / "dump.jsonl"
    with open(dump, "w") as f:
        for i, doc in enumerate(["ACME_2019_10K.pdf", "slides.pdf"]):
            sparse, dense = [p / 100 for p in range(10)], [p / 100 for p in range(10)]  # top 5: pages 6-10
            (sparse if i == 0 else dense)[3] = 1.0  # the filing's question: BM25 finds page 4; the slides': dense
            f.write(json.dumps({"qid": str(i), "doc": doc, "evidence": [4], "pages": list(range(1, 11)),
                                "sparse": sparse, "dense": dense}) + "\n")
    dev = stress(dump, seeds=1, params={}, n=50, docs="10K").splitlines()[2].strip("| ").split(" | ")[1:]
    assert dev[METHODS.index("sparse")] == "1.000" and dev[METHODS.index("dense")] == "0.000"
    both = stress(dump, seeds=1, params={}, n=50).splitlines()[2].strip("| ").split(" | ")[1:]
    assert both[METHODS.index("sparse")] == "0.500"
    with pytest.raises(SystemExit, match="no question on a document whose name contains 'annual'"):
        stress(dump, seeds=1, params={}, n=50, docs="annual")


def test_fusion_stress_bench_rebuilds_the_dense_score_from_its_terms(tmp_path):
    """--pooled-weight W: dense = best chunk + W x pooled from the dump's terms; an older dump is refused."""
    from docrefrag.evals.bench_fusion import METHODS, stress

    dump = tmp_path / "dump.jsonl"
    chunks = [0.9 if p == 2 else 0.5 for p in range(1, 11)]  # the best chunk alone: page 2
    pooled = [0.9 if p == 7 else 0.0 for p in range(1, 11)]  # page 7 as a whole
    with open(dump, "w") as f:  # evidence page 7; "dense" as dumped (weight 1) puts it first
        f.write(json.dumps({"qid": "0", "doc": "a.pdf", "evidence": [7], "pages": list(range(1, 11)),
                            "sparse": [0.0] * 10, "dense": [c + p for c, p in zip(chunks, pooled, strict=True)],
                            "dense_chunks": chunks, "dense_pooled": pooled}) + "\n")
    def recall1(weight):  # the dense branch's recall@5 with n=1 candidate: is page 7 its top page?
        return (stress(dump, seeds=1, params={}, n=1, pooled_weight=weight).splitlines()[2].strip("| ")
                .split(" | ")[1 + METHODS.index("dense")])
    assert recall1(None) == recall1(0.5) == "1.000" and recall1(0.0) == "0.000"
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"qid": "0", "doc": "a.pdf", "evidence": [7], "pages": [7], "sparse": [0.0],
                               "dense": [1.0]}) + "\n")
    with pytest.raises(SystemExit, match="no dense_chunks / dense_pooled terms"):
        stress(old, seeds=1, params={}, n=1, pooled_weight=0.5)


def test_fusion_stress_bench_gates_the_failing_branch_by_its_pseudo_query_health(tmp_path):
    """With the dump's pseudo-query runs, the noise replaces the branch on them too, its health falls and
    the consistency fusion takes the other branch alone: its worst margin is 0, as the branch's own."""
    from docrefrag.evals.bench_fusion import METHODS, stress

    rng = np.random.default_rng(0)
    dump = tmp_path / "dump.jsonl"
    pages = list(range(1, 31))
    with open(dump, "w") as f:
        for i in range(8):  # both branches find the evidence page, the dense one less sharply
            sparse, dense = rng.uniform(0.0, 1.0, 30), rng.normal(0.0, 1.0, 30)
            sparse[i], dense[i] = 3.0, 4.0
            f.write(json.dumps({"qid": str(i), "doc": "report.pdf", "evidence": [i + 1], "pages": pages,
                                "sparse": sparse.tolist(), "dense": dense.tolist()}) + "\n")
        runs = []
        for j in range(32):
            sparse, dense = rng.uniform(0.0, 1.0, 30), rng.uniform(0.0, 1.0, 30)
            sparse[j % 30], dense[j % 30] = 9.0, 9.0
            runs.append([j % 30 + 1, sparse.tolist(), dense.tolist()])
        f.write(json.dumps({"pseudo_queries": "report.pdf", "pages": pages, "runs": runs}) + "\n")
    lines = stress(dump, seeds=2, params={}, n=50).splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line.strip("| ").split(" | ")[1:] for line in lines[2:]}
    col = {m: i for i, m in enumerate(METHODS)}
    worst = rows["worst margin to the best branch (noise cases)"]
    assert worst[col["consistency"]] == "+0.000" and rows["dev"][col["consistency"]] == "1.000"
    health = lines[-1].removeprefix("branch health, weaker / stronger branch per document: dev min ")
    assert health.startswith("1.00 (1 documents measured; BM25 1.00-1.00, dense 1.00-1.00)")
    assert float(health.rsplit("max ", 1)[1]) < 0.5
    for case in ("sparse U", "sparse G", "dense U", "dense G"):  # the other branch alone, exactly
        best = max(float(rows[case][col["sparse"]]), float(rows[case][col["dense"]]))
        assert float(rows[case][col["consistency"]]) == best
    no_runs = tmp_path / "old.jsonl"
    no_runs.write_text("".join(line for line in open(dump) if "pseudo_queries" not in line))
    old = [line.strip("| ").split(" | ")[1:] for line in stress(no_runs, seeds=2, params={}, n=50).splitlines()[2:]]
    assert all(r[col["consistency"]] == r[col["consistency, no health"]] for r in old)  # an older dump: no gating

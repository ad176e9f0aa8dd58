"""Fusion under stress: every fusion method on dumps of both branches' scores, as they are and with one
branch replaced by noise (a branch that fails on a corpus, e.g. BM25 on repetitive vocabulary).

    python -m docrefrag.evals.bench_fusion dump mmlongbench --data ../shared/data/mmlongbench \\
        --store STORE --out mmlb.jsonl
    python -m docrefrag.evals.bench_fusion stress mmlb.jsonl [--seeds 3] [--set a0=0.35 --set eta=0] \\
        [--docs 10K] [--pooled-weight 0]

`dump` writes, per answerable question with evidence pages, its document's name and both branches' scores for every
page of that document, and the dense score's two terms (the best chunk's cosine and the pooled vector's,
indexes/visual.py); and, per document, both branches' scores of every page for each of its pseudo-queries
(indexes/health.py). `stress --pooled-weight W` rebuilds the dense score with weight W on the pooled term instead (0:
the best chunk alone), `stress --docs TEXT` keeps the questions on documents whose name contains TEXT (e.g. "10K":
MMLongBench-Doc's annual filings). `stress` emulates the searcher's candidates (each branch's top `--candidates`
pages) and reports Recall@5 per method: "dev" as dumped, then "<branch> U|G": that branch's scores replaced by uniform
(U[0, 1]) or Gaussian (sd 0.29, the same spread) noise plus 0.2 x its own min-max scores, on the questions and on the
pseudo-queries alike (the branch fails on the corpus), mean over seeds; "consistency, no pages" is the method without
the candidates' page keys (no smoothness term) and without the branch health, "consistency, no health" with the page
keys but without the health. The last rows: each method's worst mean margin to the best branch over the noise cases,
and the standard error of that margin (paired per question, bootstrap over questions).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from docrefrag.evals.metrics import bootstrap_se, recall_at
from docrefrag.indexes.fusion import fuse, minmax
from docrefrag.indexes.health import BranchHealth, health_of, pseudo_query_runs

BRANCH_METHODS = ("sparse", "dense")
METHODS = (*BRANCH_METHODS, "rrf", "sum", "consistency, no pages", "consistency, no health", "consistency")


def dump(benchmark: str, data: Path, store_dir: Path, out: Path) -> int:
    from docrefrag.core.text_embedder import TextEmbedder
    from docrefrag.evals.harness import prepare
    from docrefrag.indexes.hybrid import HybridSearcher
    from docrefrag.indexes.store import Store
    from docrefrag.indexes.visual_backends import CHUNKS, POOLED

    with Store(store_dir) as store:
        embedder = TextEmbedder.default()
        present, doc_ids, _ = prepare(benchmark, data, store, None, False, embedder)
        searcher = HybridSearcher(store, embedder, n_candidates=1_000_000)  # every page of the document
        asked = [q for q in present if q.evidence_pages and q.answerable and q.doc_name in doc_ids]
        with open(out, "w") as f:
            start = time.perf_counter()
            names = sorted({q.doc_name for q in asked})
            for name in names:  # first, so that the searcher finds each document's health recorded
                pages, runs = pseudo_query_runs(searcher, doc_ids[name])
                store.health.record(doc_ids[name], health_of(pages, runs))
                f.write(json.dumps({"pseudo_queries": name, "pages": pages,
                                    "runs": [[src, sp.tolist(), de.tolist()] for src, sp, de in runs]}) + "\n")
            print(f"pseudo-queries of {len(names)} documents: "
                  f"{(time.perf_counter() - start) / max(len(names), 1):.1f} s per document")
            for q in asked:
                doc = doc_ids[q.doc_name]
                cands = searcher.candidates(q.question, [doc], k=1_000_000)
                order = np.argsort([key[1] for key in cands.keys])
                pages = [cands.keys[i][1] for i in order]
                vec = searcher.embedder.embed_queries([q.question])[0]
                terms = {using: {h.page: h.score for h in store.visual.vector_search(vec, using, 1_000_000, [doc])}
                         for using in (CHUNKS, POOLED)}
                f.write(json.dumps({"qid": q.qid, "doc": q.doc_name, "evidence": list(q.evidence_pages), "pages": pages,
                                    "sparse": cands.sparse[order].tolist(), "dense": cands.dense[order].tolist(),
                                    **{f"dense_{using}": [terms[using].get(p, np.nan) for p in pages]
                                       for using in (CHUNKS, POOLED)}}) + "\n")
    return len(asked)


def _candidates(pages: np.ndarray, sparse: np.ndarray, dense: np.ndarray, n: int):
    """Each branch's top n pages (NaN elsewhere), restricted to their union, as HybridSearcher.candidates."""
    masked = []
    for x in (sparse, dense):
        m = np.full_like(x, np.nan)
        top = np.argsort(-x, kind="stable")[:n]
        m[top] = x[top]
        masked.append(m)
    keep = np.isfinite(masked[0]) | np.isfinite(masked[1])
    return pages[keep], masked[0][keep], masked[1][keep]


def _recall5(rows: list, params: dict, n: int, health: dict[str, BranchHealth]) -> dict[str, np.ndarray]:
    """Recall@5 of every method, one value per question; `health` by document name."""
    per_question: dict[str, list[float]] = {m: [] for m in METHODS}
    for doc, pages, evidence, sparse, dense in rows:
        pages, sparse, dense = _candidates(pages, sparse, dense, n)
        keys = [("doc", int(p)) for p in pages]
        h = health.get(doc, BranchHealth.unmeasured())
        by_page = np.tile([h.sparse, h.dense], (len(pages), 1))  # (n, 2)
        for method in METHODS:
            name = method.split(",")[0]
            fused = fuse(sparse, dense, name, keys if method != "consistency, no pages" else None,
                         by_page if method == "consistency" else None, **(params if name == "consistency" else {}))
            ranked = [int(pages[i]) for i in np.argsort(-fused, kind="stable")]
            per_question[method].append(recall_at(ranked, set(evidence), 5))
    return {m: np.array(v) for m, v in per_question.items()}


def _noisy(x: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    """A branch that fails: uniform (U[0, 1]) or Gaussian (sd 0.29) noise plus 0.2 x its min-max scores."""
    noise = rng.uniform(0.0, 1.0, len(x)) if kind == "U" else rng.normal(0.0, 0.29, len(x))
    return noise + 0.2 * minmax(np.where(np.isfinite(x), x, np.nanmin(x)))


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0.0 else float("nan")  # NaN: unmeasured, or no branch above chance


def stress(path: Path, seeds: int, params: dict, n: int, docs: str | None = None,
           pooled_weight: float | None = None) -> str:
    base, pseudo = [], {}
    for line in open(path):
        r = json.loads(line)
        if "pseudo_queries" in r:
            if docs is None or docs in r["pseudo_queries"]:
                pseudo[r["pseudo_queries"]] = (r["pages"], [(src, np.array(sp, dtype=float), np.array(de, dtype=float))
                                                           for src, sp, de in r["runs"]])
            continue
        if docs is not None and docs not in r["doc"]:
            continue
        if pooled_weight is None:
            dense = np.array(r["dense"])
        elif "dense_chunks" not in r:
            raise SystemExit(f"{path} has no dense_chunks / dense_pooled terms (an older dump): dump it again")
        else:
            dense = np.array(r["dense_chunks"], dtype=float) + pooled_weight * np.array(r["dense_pooled"], dtype=float)
        base.append((r["doc"], np.array(r["pages"]), r["evidence"], np.array(r["sparse"]), dense))
    if not base:
        raise SystemExit(f"{path}: no question on a document whose name contains {docs!r}")
    if pooled_weight is not None and pseudo:  # the runs hold the dumped dense score, not the rebuilt one
        print("note: --pooled-weight rebuilds the questions' dense score only: no branch health in this run")
        pseudo = {}
    elif not pseudo:
        print(f"note: {path} has no pseudo-query runs (an older dump): no branch health, dump it again")
    dev_health = {doc: health_of(*runs) for doc, runs in pseudo.items()}
    results = {"dev": _recall5(base, params, n, dev_health)}
    noise_ratios = []  # the noisy branch's health over the real one's, per document and noise run
    for branch in BRANCH_METHODS:
        b = BRANCH_METHODS.index(branch)
        for kind in ("U", "G"):
            runs = []
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                rows = []
                for doc, pages, evidence, *scores in base:
                    scores[b] = _noisy(scores[b], kind, rng)
                    rows.append((doc, pages, evidence, *scores))
                rng = np.random.default_rng([seed, 1])  # the branch fails on the pseudo-queries too
                health = {}
                for doc, (pages, pq) in pseudo.items():
                    noisy_runs = []
                    for source, *scores in pq:
                        scores[b] = _noisy(scores[b], kind, rng)
                        noisy_runs.append((source, *scores))
                    health[doc] = h = health_of(pages, noisy_runs)
                    noise_ratios.append(_ratio((h.sparse, h.dense)[b], (h.dense, h.sparse)[b]))
                runs.append(_recall5(rows, params, n, health))
            results[f"{branch} {kind}"] = {m: np.mean([r[m] for r in runs], axis=0) for m in METHODS}  # (questions,)
    lines = ["| case | " + " | ".join(METHODS) + " |", "|---|" + "---|" * len(METHODS)]
    for case, r in results.items():
        lines.append(f"| {case} | " + " | ".join(f"{r[m].mean():.3f}" for m in METHODS) + " |")
    margins = {m: [r[m] - r[max(BRANCH_METHODS, key=lambda b: r[b].mean())] for c, r in results.items() if c != "dev"]
               for m in METHODS}  # per noise case, per question: the method minus the case's best branch
    worst = {m: min(margins[m], key=np.mean) for m in METHODS}
    lines.append("| worst margin to the best branch (noise cases) | "
                 + " | ".join(f"{worst[m].mean():+.3f}" for m in METHODS) + " |")
    lines.append("| its standard error (bootstrap over questions) | "
                 + " | ".join(f"{bootstrap_se(worst[m]):.3f}" for m in METHODS) + " |")
    dev_ratios = [_ratio(min(h.sparse, h.dense), max(h.sparse, h.dense)) for h in dev_health.values()]
    if any(np.isfinite(dev_ratios)):
        spans = ", ".join(f"{name} {np.nanmin(h):.2f}-{np.nanmax(h):.2f}" for name, h in
                          (("BM25", [h.sparse for h in dev_health.values()]),
                           ("dense", [h.dense for h in dev_health.values()])))
        lines.append(f"branch health, weaker / stronger branch per document: dev min {np.nanmin(dev_ratios):.2f} "
                     f"({np.isfinite(dev_ratios).sum()} documents measured; {spans}); noise branch / the other in the "
                     f"noise cases: median {np.nanmedian(noise_ratios):.2f}, max {np.nanmax(noise_ratios):.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="both branches' scores for every page of each question's document")
    d.add_argument("benchmark", choices=["mmlongbench", "longdocurl"])
    d.add_argument("--data", type=Path, required=True)
    d.add_argument("--store", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("stress", help="Recall@5 of every fusion method, as dumped and with one branch noise")
    s.add_argument("dump", type=Path)
    s.add_argument("--seeds", type=int, default=3)
    s.add_argument("--candidates", type=int, default=50, help="pages each branch proposes (HybridSearcher's default)")
    s.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a FusionConfig field of the consistency method, e.g. eta=0")
    s.add_argument("--docs", metavar="TEXT", help="only the questions on documents whose name contains TEXT")
    s.add_argument("--pooled-weight", type=float, metavar="W",
                   help="rebuild the dense score as best chunk + W x pooled from the dump's terms "
                        "(0: best chunk alone)")
    args = parser.parse_args()
    if args.command == "dump":
        print(f"{dump(args.benchmark, args.data, args.store, args.out)} questions -> {args.out}")
    else:
        params = {k: float(v) for k, v in (item.split("=", 1) for item in args.set)}
        print(stress(args.dump, args.seeds, params, args.candidates, args.docs, args.pooled_weight))


if __name__ == "__main__":
    main()

"""Markdown reports with plots (matplotlib, Agg backend: files only, no display)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from evals.metrics import KS


def recall_curves(per_method: dict[str, dict[str, float]], out: Path, title: str) -> Path:
    """Recall@k against k, one line per method; written to `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    for method, metrics in per_method.items():
        ax.plot(KS, [metrics[f"recall@{k}"] for k in KS], marker="o", label=method)
    ax.set(xlabel="k (pages)", ylabel="Recall@k", title=title, xticks=list(KS), ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def latency_histogram(latencies_ms: Sequence[float], out: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    ax.hist(latencies_ms, bins=30)
    ax.set(xlabel="latency (ms)", ylabel="questions", title=title)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def accuracy_by_budget(rows: Sequence[dict], out: Path, title: str) -> Path:
    """Answer accuracy against the expansion budget p, one line per selector (rows of
    evals.reader_evals.selectors: p, selector, accuracy); written to `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    for name in dict.fromkeys(r["selector"] for r in rows):
        points = sorted((r["p"], r["accuracy"]) for r in rows if r["selector"] == name)
        ax.plot([p for p, _ in points], [a for _, a in points], marker="o", label=name)
    ax.set(xlabel="expansion budget p", ylabel="accuracy", title=title, ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out

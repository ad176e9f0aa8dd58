"""Markdown reports with plots (matplotlib, Agg backend: files only, no display)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from docrefrag.evals.metrics import KS


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


def answers_markdown(summary: dict, latency_png: Path | None) -> str:
    """The end-to-end report: headline numbers, then every breakdown of the official aggregate
    (groups of {accuracy, count}), the run's settings, then the latency plot."""
    title = f"# {summary['benchmark']} end to end ({summary.get('questions', 0)} questions, {summary['date']})"
    head = ["| measure | value |", "|---|---|"]
    groups: list[str] = []
    for key, value in summary.items():
        if key in ("benchmark", "date"):
            continue
        if key == "settings":  # models, reader checkpoint, ask config, encoder (evals.harness.run_settings)
            groups.append(f"## settings\n\n```json\n{json.dumps(value, indent=2, sort_keys=True)}\n```")
            continue
        if key == "abstention_curve":  # evals.answers.abstention_curve: {tau: {accuracy, f1}}
            rows = "\n".join(f"| {tau} | {v['accuracy']:.3f} | {_number(v['f1'])} |" for tau, v in value.items())
            groups.append(f"## abstention curve\n\n| tau | accuracy | F1 |\n|---|---|---|\n{rows}")
        elif isinstance(value, dict) and value and all(isinstance(v, dict) and "accuracy" in v for v in value.values()):
            rows = "\n".join(f"| {name} | {g['accuracy']:.3f} | {g['count']} |" for name, g in value.items())
            groups.append(f"## {key.replace('_', ' ')}\n\n| group | accuracy | questions |\n|---|---|---|\n{rows}")
        elif isinstance(value, dict) and "accuracy" in value:
            head.append(f"| {key.replace('_', ' ')} | {value['accuracy']:.3f} ({value['count']} questions) |")
        elif isinstance(value, dict):
            cells = ", ".join(f"{k} {_number(v)}" for k, v in value.items())
            head.append(f"| {key.replace('_', ' ')} | {cells} |")
        else:
            head.append(f"| {key.replace('_', ' ')} | {f'{value:.3f}' if isinstance(value, float) else value} |")
    plot = [f"![latency]({latency_png.name})"] if latency_png else []
    return "\n\n".join([title, "\n".join(head), *groups, *plot]) + "\n"


def _number(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "-" if value is None else str(value)


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


def budget_curves(rows: Sequence[dict], out: Path, title: str) -> Path:
    """Accuracy (or, for rows without a score, evidence-page recall) against the reader's token budget, one
    line per method and question kind (single- / cross-page); written to `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = "score" if all("score" in r for r in rows) else "recall"
    lines: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        label = f"{r['method']}, {'cross' if r['cross_page'] else 'single'}-page"
        lines.setdefault(label, {}).setdefault(r["budget"], []).append(float(r[metric]))
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    budgets = sorted({r["budget"] for r in rows})
    for label, by_budget in sorted(lines.items()):  # colour: the question kind; solid: the controller
        xs = sorted(by_budget)
        ax.plot(xs, [sum(by_budget[b]) / len(by_budget[b]) for b in xs], marker="o", label=label,
                color="C0" if "single" in label else "C1", linestyle="-" if label.startswith("graph") else "--")
    ax.set(xlabel="reader tokens per question", ylabel="accuracy" if metric == "score" else "evidence-page recall",
           title=title, xscale="log")
    ax.set_ylim(0, 1 if metric == "recall" else None)  # accuracies near 0 would lie flat on a 0..1 axis
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out

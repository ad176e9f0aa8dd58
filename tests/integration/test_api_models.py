"""The API's work on the models and benchmarks (docrefrag/api_models.py), and the CLI over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docrefrag import DocRefrag
from docrefrag.cli import main
from docrefrag.cli_common import EXIT_ERROR, EXIT_OK
from docrefrag.evals.jsonl import load_rows


def _benchmark(root: Path, light_pdf) -> Path:
    light_pdf(root / "documents" / "survey.pdf", pages=8)
    rows = [{"doc_id": "survey.pdf", "doc_type": "Guidebook", "question": f"How many animals near station s00{n}?",
             "answer": "3", "evidence_pages": f"[{n}]", "evidence_sources": "['Pure-text (Plain-text)']",
             "answer_format": "Int"} for n in (4, 7)]
    (root / "samples.json").write_text(json.dumps(rows))
    return root


def test_the_cli_eval_is_the_api_evaluation(tmp_path, light_pdf):
    data = _benchmark(tmp_path / "bench", light_pdf)
    with DocRefrag(store=tmp_path / "store") as dr:
        report = dr.evaluate_retrieval("mmlongbench", data, tmp_path / "api")
    assert report.questions == 2 and not any(report.skipped.values())
    rc = main(["eval", "mmlongbench", "--data", str(data), "--store", str(tmp_path / "store"), "--retrieval-only",
               "--out", str(tmp_path / "cli")])
    assert rc == EXIT_OK

    def rankings(out: Path) -> list:
        return [{m: r[m]["ranked"] for m in ("sparse", "dense", "consistency")}
                for r in load_rows(out / "mmlongbench-retrieval.jsonl").values()]

    api_rows = rankings(tmp_path / "api")
    assert api_rows == rankings(tmp_path / "cli")
    assert [r["consistency"][0] for r in api_rows] == [4, 7]  # each station's own page first


def test_models_list_the_shipped_reader_and_each_weight(capsys):
    reader, rows = DocRefrag.models()
    assert reader["present"] and reader["verified"] and reader["stages"]
    assert {"minilm", "smollm2"} <= {r["name"] for r in rows}
    main(["models", "list", "--json"])
    listed = json.loads(capsys.readouterr().out)
    assert listed[-1]["path"] == reader["path"] and [r["name"] for r in listed[:-1]] == [r["name"] for r in rows]


def test_bench_reader_refuses_what_it_cannot_measure(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"pages must be >= 1 \(--pages\), got 0"):
        DocRefrag(store=tmp_path / "store").bench_reader(pages=0)
    assert main(["bench", "reader", "--store", str(tmp_path / "store")]) == EXIT_ERROR
    assert "--store names the store of --doc: pass --doc too" in capsys.readouterr().err


def test_shipping_a_trained_reader_replaces_the_default_whole(tmp_path, monkeypatch):
    default = tmp_path / "package" / "checkpoints" / "reader"
    default.mkdir(parents=True)
    (default / "old.bin").write_text("old")
    trained = tmp_path / "run" / "stage3"
    trained.mkdir(parents=True)
    (trained / "manifest.json").write_text("{}")
    monkeypatch.setattr("docrefrag.core.reader.DEFAULT_CHECKPOINT", default)
    monkeypatch.setattr("docrefrag.core.train.train", lambda stages, config, *_, **__: trained)

    from docrefrag.core.config import TrainConfig

    assert DocRefrag.train_reader(["stage3"], TrainConfig(out=tmp_path / "run"), ship=False) == trained
    assert sorted(p.name for p in default.iterdir()) == ["old.bin"]
    assert DocRefrag.train_reader(["stage3"], TrainConfig(out=tmp_path / "run"), ship=True) == trained
    assert sorted(p.name for p in default.parent.iterdir()) == ["reader"]  # no half-copied folder beside it
    assert sorted(p.name for p in default.iterdir()) == ["manifest.json"]

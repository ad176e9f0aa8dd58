"""Each training stage runs real steps on a tiny random decoder: the parameters the stage trains
change, every other one stays put; a stage resumes from its state; the checkpoint records the stages."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch
from conftest import tiny_llama

from docrefrag.core.checkpoint import read_checkpoint_config
from docrefrag.core.config import ExampleConfig, TrainConfig
from docrefrag.core.train import STAGES, Trainer, checkpoint_path, is_trained_in
from docrefrag.evals.score_mmlongbench import mmlongbench_score
from docrefrag.indexes.corpus import CorpusIndex


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory):
    from transformers import AutoTokenizer

    from docrefrag.core.weights import model_dir

    path = tmp_path_factory.mktemp("tiny-decoder")
    tokenizer = AutoTokenizer.from_pretrained(model_dir("smollm2"), local_files_only=True)
    tiny_llama(tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def trainer(tiny_decoder, tmp_path_factory):
    config = TrainConfig(out=tmp_path_factory.mktemp("train"), docs=2, pages=4, steps=4, group=3, answer_tokens=3,
                         decoder=tiny_decoder, examples=ExampleConfig(noisy_pages=(1, 2)), save_every=2)
    t = Trainer(config, CorpusIndex, mmlongbench_score, show_progress=False)
    yield t
    t.close()


def snapshot(reader) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in reader.named_parameters()}


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_changes_exactly_its_trainable_parameters(trainer, stage, monkeypatch):
    for earlier in STAGES[:STAGES.index(stage)]:
        if not checkpoint_path(trainer.config, earlier).is_dir():
            trainer.run(earlier, command="test")
    reader, _ = trainer.reader(stage)
    before = snapshot(reader)
    (trainer.config.out / stage / "state.pt").unlink(missing_ok=True)
    steps, *_ = trainer.fit(stage, reader)
    assert steps == trainer.config.steps
    if stage == "stage3":  # the dense reward: a gold answer's mean log-probability, negative, and recorded
        rewards = [json.loads(line).get("reward") for line in (trainer.config.out / stage / "log.jsonl").open()]
        assert len(rewards) >= steps and all(r is not None and r < 0 for r in rewards)
    after = snapshot(reader)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    trained = {n for n in before if is_trained_in(stage, n)}
    assert trained and changed <= trained
    frozen = set(before) - trained
    assert frozen and not (changed & frozen)
    assert changed == trained


def test_stages_resume_and_the_checkpoint_records_each_stage(trainer):
    config = trainer.config
    trainer.run("stage1", command="test stage1")
    log = (config.out / "stage1" / "log.jsonl").read_text().splitlines()
    trainer.run("stage1", command="test stage1 again")  # state says 4 of 4 steps: nothing more to do
    assert (config.out / "stage1" / "log.jsonl").read_text().splitlines() == log
    trainer.run("stage2", command="test stage2")
    record = read_checkpoint_config(checkpoint_path(config, "stage2"))["stages"]
    assert [r["stage"] for r in record] == ["stage1", "stage2"]
    assert all(r["steps"] == 4 and r["seed"] == 0 and "command" in r and "minutes" in r and "data" in r for r in record)


def test_a_stage_run_in_several_sittings_records_each_one(tiny_decoder, tmp_path):
    config = TrainConfig(out=tmp_path, docs=2, pages=4, steps=2, decoder=tiny_decoder,
                         examples=ExampleConfig(noisy_pages=(1, 2)), save_every=1)
    sittings = [(config, "first sitting"), (dataclasses.replace(config, steps=3), "second sitting"),
                (dataclasses.replace(config, steps=3), "nothing left to do")]
    # resumed with a larger budget, then again
    for cfg, command in sittings:
        t = Trainer(cfg, CorpusIndex, mmlongbench_score, show_progress=False)
        try:
            t.run("stage1", command=command)
        finally:
            t.close()
    record = read_checkpoint_config(checkpoint_path(config, "stage1"))["stages"][-1]
    assert record["steps"] == 3 and record["command"] == "nothing left to do"
    assert [(s["command"], s["steps"]) for s in record["segments"]] == [("first sitting", [0, 2]),
                                                                         ("second sitting", [2, 3])]
    assert all(s["minutes"] >= 0 for s in record["segments"])


def test_a_stage_without_its_predecessor_says_what_to_run(tiny_decoder, tmp_path):
    config = TrainConfig(out=tmp_path, docs=2, pages=4, steps=1, decoder=tiny_decoder,
                         examples=ExampleConfig(noisy_pages=(1, 2)))
    t = Trainer(config, CorpusIndex, mmlongbench_score, show_progress=False)
    try:
        with pytest.raises(FileNotFoundError, match="docrefrag train warmstart"):
            t.run("stage3")
    finally:
        t.close()


@pytest.mark.parametrize("share, expected", [(0.0, []), (0.25, [3, 7]), (1.0, list(range(8)))])
def test_rerank_share_spreads_the_page_relevance_steps(trainer, share, expected, monkeypatch):
    from dataclasses import replace

    monkeypatch.setattr(trainer, "config", replace(trainer.config, rerank_share=share))
    assert [step for step in range(8) if trainer.draw("stage2", step, 0.0).kind == "rerank"] == expected


def test_rerank_examples_put_the_evidence_first_among_pages_without_it(trainer):
    sampler = trainer.sampler
    for step in range(6):
        ex = sampler.rerank(step)
        doc_id = ex.pages[0][0]
        evidence = {(d, q.page) for d, q in sampler.questions if d == doc_id and q.question == ex.prompt}
        assert ex.pages[0] in evidence and not evidence & set(ex.pages[1:])
        assert len(set(ex.pages)) == len(ex.pages) <= sampler.config.rerank_pages
        assert any(k[0] == doc_id for k in ex.pages[1:])  # the other pages of its document: what a rerank sorts
        assert ex.target == "Yes" and ex.kind == "rerank"


def test_noisy_examples_place_the_evidence_first_or_at_random(trainer, monkeypatch):
    from dataclasses import replace

    def evidence_positions(sampler):
        positions = []
        for step in range(12):
            ex = sampler.qa(step, "noisy")
            truth = {(d, q.page) for d, q in sampler.questions if q.question == ex.prompt}
            positions.append(next(i for i, key in enumerate(ex.pages) if key in truth))
        return positions

    assert set(evidence_positions(trainer.sampler)) == {0}
    monkeypatch.setattr(trainer.sampler, "config", replace(trainer.sampler.config, placement="random"))
    assert set(evidence_positions(trainer.sampler)) - {0}  # somewhere else at least once in 12 draws


def test_the_rerank_loss_rewards_the_evidence_page_ranked_first(trainer, monkeypatch):
    reader, _ = trainer.reader("stage2")
    ex = trainer.sampler.rerank(0)
    n = len(ex.pages)
    losses = {}
    for name, logits in {"evidence first": torch.tensor([4.0] + [-4.0] * (n - 1)),
                         "evidence last": torch.tensor([-4.0] * (n - 1) + [4.0])}.items():
        monkeypatch.setattr(reader, "yes_logits", lambda question, tokens, v=logits: v)
        losses[name] = trainer.supervised_loss(reader, ex, "stage2").item()
    assert losses["evidence first"] < 0.05 < 8.0 < losses["evidence last"]


def test_training_task_reconstruction_scores_both_stage1_tasks(trainer):
    from docrefrag.evals.reader_evals import training_task_reconstruction

    reader, _ = trainer.reader("stage1")
    with torch.no_grad():
        rows = training_task_reconstruction(reader, trainer, 2, new_tokens=3)
    assert [(r["task"], r["examples"]) for r in rows] == [("parse", 2), ("locate", 2)]
    assert all(0.0 <= r["anls"] <= r["similarity"] + 1e-9 <= 1.0 + 1e-9 for r in rows)


def test_train_refuses_a_device_it_cannot_use_before_any_work(tmp_path, capsys, monkeypatch):
    from docrefrag.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device, message in [("gpu", "unknown device 'gpu'; use cpu, cuda or cuda:N"),
                            ("cuda", "device 'cuda', but this torch build sees no CUDA GPU")]:
        assert main(["train", "all", "--out", str(tmp_path / "run"), "--device", device]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, message", [
    (["--noisy-pages", "6", "3"], r"noisy_pages \(--noisy-pages LO HI\) needs 1 <= LO <= HI, got 6 3"),
    (["--noisy-pages", "0", "3"], r"--noisy-pages LO HI"),
    (["--multi-pages", "3", "2"], r"multi_pages \(--multi-pages LO HI\) needs 1 <= LO <= HI, got 3 2"),
    (["--grpo-data", "questions"], r"--grpo-data and --grpo-store go together"),
])
def test_train_refuses_bad_example_sizes_before_any_work(tmp_path, capsys, args, message):
    """Checked at once: before, the CLI built the corpus and ran stage 1 before stage 2 failed."""
    from docrefrag.cli import main

    assert main(["train", "all", "--out", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_trained_on_another_decoder_loads_it_by_itself(trainer, tiny_decoder, tmp_path):
    from docrefrag.core.checkpoint import CheckpointError, save_checkpoint
    from docrefrag.core.reader import load_reader

    config = trainer.config
    trainer.run("stage1", command="test stage1")
    embed, encoder_id = trainer.encoder.embedder.embed_queries, trainer.encoder.encoder_id
    reader = load_reader(checkpoint_path(config, "stage1"), embed_question=embed, encoder_id=encoder_id)
    assert reader.decoder_path == str(tiny_decoder.resolve()) and reader.config.hidden == 32  # not the default's 576
    reader.decoder_path = str(tmp_path / "moved-away")
    save_checkpoint(reader, tmp_path / "ckpt", encoder_id, [])
    with pytest.raises(CheckpointError, match="trained with the decoder at .*moved-away, which is not there"):
        load_reader(tmp_path / "ckpt", embed_question=embed, encoder_id=encoder_id)


def test_the_training_rollout_and_ask_build_the_same_decoder_input(trainer, monkeypatch):
    """`ask` (the answer agent over a store) and a GRPO rollout read one example's pages with the same
    expanded chunks through the same build: the same embeddings, and the reward is read off them."""
    from docrefrag.agents.answer import page_texts, read_with_reader

    reader, _ = trainer.reader("stage1")
    ex = trainer.sampler.labelled_qa(0, "multi")
    store, built, build = trainer.index.store, [], reader.build
    monkeypatch.setattr(reader, "build", lambda *args: built.append((args, build(*args))) or built[-1][1])
    read_with_reader(ex.prompt, page_texts(store, ex.pages, ex.prompt, 4000), store, reader)
    monkeypatch.undo()
    [((question, _, chosen, _, _), asked)] = built
    assert question == ex.prompt and asked.expanded.any() and len(ex.pages) > 1
    with torch.no_grad():
        rollout = trainer.build(reader, ex, chosen)
        assert torch.equal(rollout.embeds, asked.embeds) and torch.equal(rollout.expanded, asked.expanded)
        assert trainer.rollout_reward(reader, ex, chosen) == reader.answer_reward(asked, ex.target)


def test_the_warm_start_loss_falls_as_the_selector_favours_the_labelled_chunks(trainer, monkeypatch):
    reader, _ = trainer.reader("stage1")
    ex = trainer.sampler.labelled_qa(0, "multi")
    labelled = trainer.mask(ex.labels, len(ex.pages)).flatten()  # (N,)
    losses = {}
    for name, logits in {"labelled high": labelled.float() * 8, "flat": torch.zeros(labelled.numel()),
                         "labelled low": -labelled.float() * 8}.items():
        monkeypatch.setattr(reader.selector, "forward", lambda question, chunks, v=logits: v)
        losses[name] = trainer.supervised_loss(reader, ex, "warmstart").item()
    assert losses["labelled high"] < losses["flat"] < losses["labelled low"]


def test_grpo_cycles_through_its_questions(trainer, monkeypatch):
    assert [trainer.question_index(s) for s in range(4)] == [0, 1, 2, 3]  # questions=0: a new one each step
    monkeypatch.setattr(trainer, "config", dataclasses.replace(trainer.config, questions=3))
    assert [trainer.question_index(s) for s in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert trainer.draw("stage3", 4, 0.0) == trainer.draw("stage3", 1, 0.0)
    with pytest.raises(ValueError, match="questions is a count"):
        dataclasses.replace(trainer.config, questions=-1)


def test_a_group_of_rollouts_serves_updates_selector_steps_clipped_to_the_sampling_policy(trainer, monkeypatch):
    import docrefrag.core.train as train_module

    if not checkpoint_path(trainer.config, "warmstart").is_dir():
        for stage in ("stage1", "stage2", "warmstart"):
            trainer.run(stage, command="test")
    monkeypatch.setattr(trainer, "config", dataclasses.replace(trainer.config, steps=1, updates=3, beta=0.0))
    (trainer.config.out / "stage3" / "state.pt").unlink(missing_ok=True)
    rollouts, ratios, grpo_loss = [], [], train_module.grpo_loss
    monkeypatch.setattr(trainer, "rollout_reward", lambda *a: rollouts.append(a) or float(len(rollouts)))
    monkeypatch.setattr(train_module, "grpo_loss", lambda log_p, log_old, *a: ratios.append(
        (log_p - log_old).detach().abs().max()) or grpo_loss(log_p, log_old, *a))
    reader, _ = trainer.reader("stage3")
    trainer.fit("stage3", reader)
    assert len(rollouts) == trainer.config.group and len(ratios) == 3  # one reading, three updates
    assert ratios[0] == 0 and ratios[2] > 0  # the first update at the sampling policy, the later ones off it


def test_grpo_with_words_compression_trains_the_selector_over_chunks_with_words(trainer, tiny_decoder, monkeypatch):
    if not checkpoint_path(trainer.config, "warmstart").is_dir():
        for stage in ("stage1", "stage2", "warmstart"):
            trainer.run(stage, command="test")
    monkeypatch.setattr(trainer, "config", dataclasses.replace(trainer.config, steps=1, compression="words"))
    with pytest.raises(ValueError, match="only the selector trains"):
        trainer.reader("stage2")
    (trainer.config.out / "stage3" / "state.pt").unlink(missing_ok=True)
    expanded = []
    rollout = trainer.rollout_reward
    monkeypatch.setattr(trainer, "rollout_reward", lambda reader, ex, expand: expanded.append(
        (expand, reader.present(trainer.regions(reader, ex.pages)))) or rollout(reader, ex, expand))
    reader, _ = trainer.reader("stage3")
    assert reader.config.compression == "words" and not any("lora_" in n for n, _ in reader.named_parameters())
    before = snapshot(reader)
    trainer.fit("stage3", reader)
    assert len(expanded) == trainer.config.group
    assert all(expand.any() and not (expand & ~present).any() for expand, present in expanded)  # never a wordless chunk
    changed = {n for n, p in snapshot(reader).items() if not torch.equal(before[n], p)}
    assert changed and all(n.startswith("selector.") for n in changed)


def test_grpo_reads_the_stated_text_questions_of_a_store_starting_from_a_checkpoint_directory(
        trainer, tiny_decoder, tmp_path, monkeypatch):
    """`train stage3 --grpo-data DIR --grpo-store STORE --init CHECKPOINT`: GRPO reads the set's questions whose
    evidence page states the answer (no chart, no unanswerable, no answer the page lacks), each with another
    page of its document, continues the checkpoint directory's selector, and its record says so."""
    from docrefrag.core.synthetic_training import training_document
    from docrefrag.evals.grpo_questions import grpo_questions
    from docrefrag.indexes.ingest import Ingestor
    from docrefrag.indexes.store import Store

    if not checkpoint_path(trainer.config, "warmstart").is_dir():
        for stage in ("stage1", "stage2", "warmstart"):
            trainer.run(stage, command="test")
    doc = training_document(tmp_path / "real.pdf", 3, 777)
    with Store(tmp_path / "store", create=True) as store, Ingestor(store, show_progress=False) as ingestor:
        [result] = ingestor.ingest([doc.path])
    facts = [f for f in doc.questions if f.page]
    samples = [{"doc_id": "real.pdf", "doc_type": "Report", "question": f.question, "answer": f.answer,
                "evidence_pages": f"[{f.page}]", "answer_format": f.answer_format,
                "evidence_sources": "['Chart']" if f.kind == "chart" else "['Pure-text (Plain-text)']"} for f in facts]
    samples.append({**samples[0], "question": "Which code name did the board adopt?", "answer": "Zyxwvut"})
    samples.append({**samples[0], "question": "Who chairs the audit committee?", "answer": "Not answerable",
                    "evidence_pages": "[]", "answer_format": "None"})
    (tmp_path / "samples.json").write_text(json.dumps(samples))
    questions = grpo_questions(tmp_path, tmp_path / "store")
    (tmp_path / "unstated").mkdir()
    (tmp_path / "unstated" / "samples.json").write_text(json.dumps(samples[-2:]))
    with pytest.raises(ValueError, match="none of the questions in .* is a stated text question"):
        grpo_questions(tmp_path / "unstated", tmp_path / "store")
    stated = {f.question for f in facts if f.kind != "chart"}
    assert questions.examples and {e.prompt for e in questions.examples} <= stated
    for ex in questions.examples:
        evidence = next(f.page for f in facts if f.question == ex.prompt)
        assert len(ex.pages) == 2 and (result.doc_id, evidence) in ex.pages
        assert {doc_id for doc_id, _ in ex.pages} == {result.doc_id} and ex.pages[0] != ex.pages[1]

    start = checkpoint_path(trainer.config, "warmstart")
    config = dataclasses.replace(trainer.config, out=tmp_path / "run", docs=2, pages=2, steps=2, group=2, questions=2,
                                 init=str(start))
    real = Trainer(config, CorpusIndex, mmlongbench_score, show_progress=False, questions=questions)
    try:
        read = []
        rollout = real.rollout_reward
        monkeypatch.setattr(real, "rollout_reward", lambda reader, ex, expand: read.append(ex) or rollout(
            reader, ex, expand))
        record = read_checkpoint_config(real.run("stage3", command="test"))["stages"]
    finally:
        real.close()
    assert {id(ex) for ex in read} == {id(ex) for ex in questions.examples[:2]}
    assert [r["stage"] for r in record] == [r["stage"] for r in read_checkpoint_config(start)["stages"]] + ["stage3"]
    assert record[-1]["data"]["questions"] == questions.source and record[-1]["data"]["init"] == str(start)

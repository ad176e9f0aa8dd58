"""The Doc-REFRAG reader on a tiny random Llama decoder (the real SmolLM2 tokenizer): shapes,
budgets, native expansion, the gold answer's log-probability, gradients, and the selectors behind
one interface."""

from __future__ import annotations

import itertools
import json
import math
import zlib

import numpy as np
import pytest
import torch
from conftest import tiny_llama

from docrefrag.core.config import ReaderConfig
from docrefrag.core.reader import ANSWER_SUFFIX, DocRefragReader
from docrefrag.core.selector import (
    AllSelector,
    ChunkSelector,
    NoneSelector,
    RandomSelector,
    SimilaritySelector,
    budget,
    draw_log_probs,
    sample_selection,
)

M, D, Q = 36, 20, 12  # a 6x6 grid of 20-dim tokens; 12-dim questions


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from docrefrag.core.weights import model_dir

    return AutoTokenizer.from_pretrained(model_dir("smollm2"), local_files_only=True)


def tiny_reader(tokenizer, k: int = 3, p: float = 0.2, seed: int = 0) -> DocRefragReader:
    decoder = tiny_llama(tokenizer, seed=seed, max_position_embeddings=2048).eval()
    config = ReaderConfig(k=k, p=p, token_dim=D, question_dim=Q, hidden=32, projector_hidden=48,
                          selector_dim=32, selector_heads=8, selector_ff=32, lora_r=4, lora_alpha=8)
    return DocRefragReader(decoder, tokenizer, config, lambda texts: np.stack(  # one vector per text, as an embedder
        [np.random.default_rng([seed, zlib.crc32(t.encode())]).standard_normal(Q) for t in texts]))


def pages(n: int, seed: int = 1) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((n, M, D)).astype(np.float32))


def native_regions(reader, n: int) -> tuple[list[list[list[str]]], list[list[list[int]]]]:
    """Words per chunk on n pages: every third chunk holds no words."""
    L = M // reader.config.k
    words = [[[] if j % 3 == 2 else [f"w{i}x{j}", "revenue", str(100 + j)] for j in range(L)] for i in range(n)]
    return words, [page_ids(reader, page) for page in words]


def page_ids(reader, chunks: list[list[str]]) -> list:
    """`region_ids` of a page whose chunks hold these words, read in chunk order."""
    starts = list(itertools.accumulate([0] + [len(words) for words in chunks]))
    spans = [list(range(start, start + len(words))) for start, words in zip(starts[:-1], chunks, strict=True)]
    return reader.region_ids([w for words in chunks for w in words], spans)


@pytest.mark.parametrize("k", [2, 3, 6])
@pytest.mark.parametrize("n", [1, 4])
def test_exactly_floor_p_n_l_chunks_are_chosen_and_those_with_words_expand_in_place(tokenizer, k, n):
    reader = tiny_reader(tokenizer, k=k)
    chunks = reader.chunks(pages(n))
    L = M // k
    assert chunks.shape == (n, L, k, D)
    expand = reader.select("How many homes?", chunks, 0.2)
    assert expand.shape == (n, L) and int(expand.sum()) == math.floor(0.2 * n * L)
    _, regions = native_regions(reader, n)
    seq = reader.build("How many homes?", chunks, expand, regions, ANSWER_SUFFIX)
    assert torch.equal(seq.expanded, expand & torch.tensor([[bool(r) for r in page] for page in regions]))
    text = int((seq.page < 0).sum())
    assert seq.embeds.shape == (text + n * L + sum(len(regions[i][j]) - 1 for i, j in seq.expanded.nonzero()), 32)
    for i in range(n):  # every chunk appears; the compressed ones one each, in raster order
        assert set(seq.chunk[seq.page == i].tolist()) == set(range(L))
        assert seq.chunk[(seq.page == i) & (seq.slot < 0)].tolist() == [j for j in range(L) if not seq.expanded[i, j]]


def test_full_and_compressed_modes_through_the_same_interface(tokenizer):
    reader = tiny_reader(tokenizer)
    chunks = reader.chunks(pages(2))
    _, regions = native_regions(reader, 2)
    full = reader.select("q", chunks, 0.2, AllSelector())
    none = reader.select("q", chunks, 0.2, NoneSelector())
    assert full.all() and not none.any()
    words = sum(len(ids) for page in regions for ids in page)
    with_words = sum(bool(ids) for page in regions for ids in page)
    assert reader.build("q", chunks, full, regions, ANSWER_SUFFIX).embeds.shape[0] - \
        reader.build("q", chunks, none, regions, ANSWER_SUFFIX).embeds.shape[0] == words - with_words
    T = budget(0.2, 2, M // 3)
    for selector in (RandomSelector(3), SimilaritySelector(text_dim=Q)):
        assert int(reader.select("q", chunks, 0.2, selector).sum()) == T


def test_similarity_selector_picks_the_chunk_that_holds_the_question(tokenizer):
    tokens = torch.zeros(1, M, D)
    question = torch.randn(D)
    tokens[0, 7, :] = question  # chunk 2 at k = 3
    tokens[0, :, :] += 0.01 * torch.randn(M, D)
    chosen = SimilaritySelector(text_dim=D).choose(question, tokens.reshape(M // 3, 3, D), 1)
    assert chosen.tolist() == [2]


def test_an_untrained_selector_ranks_chunks_by_question_similarity_and_learns_from_there(tokenizer):
    reader = tiny_reader(tokenizer)
    chunks = reader.chunks(pages(2)).reshape(-1, 3, D)
    question = reader.question_vector("What is the value?")
    for T in (1, 4, 9):
        assert torch.equal(reader.selector.choose(question, chunks, T),
                           SimilaritySelector(text_dim=Q).choose(question, chunks, T))
    assert reader.selector.prior in reader.trainable()["selector"]


def test_a_checkpoint_whose_selector_does_not_fit_is_refused_with_what_to_do(tokenizer, tmp_path):
    from safetensors.torch import load_file, save_file

    from docrefrag.core.checkpoint import MANIFEST, CheckpointError, load_parts, save_checkpoint
    from docrefrag.core.weights_verify import sha256_file

    path = save_checkpoint(tiny_reader(tokenizer), tmp_path / "old", "enc", [])
    parts = {k: v for k, v in load_file(path / "reader.safetensors").items() if k != "selector.prior"}
    save_file(parts, path / "reader.safetensors")  # as saved before the selector had its similarity prior
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["files"]["reader.safetensors"] = sha256_file(path / "reader.safetensors")
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="selector.*does not fit.*retrain"):
        load_parts(tiny_reader(tokenizer), path, "enc")


def test_answer_decodes_greedily_within_the_bound_and_reports_its_expansions(tokenizer):
    reader = tiny_reader(tokenizer)
    _, regions = native_regions(reader, 3)
    out = reader.answer("What is the value?", pages(3), regions, max_new_tokens=5, stop=False)
    assert out.output_tokens == 5 and out.ttft_s > 0
    assert 0 < len(out.expanded) <= budget(0.2, 3, M // 3)
    assert all(regions[i][j] for i, j in out.expanded)
    again = reader.answer("What is the value?", pages(3), regions, max_new_tokens=5, stop=False)
    assert again.text == out.text  # greedy: deterministic


def test_a_batch_decodes_each_row_as_it_decodes_alone_and_stops_each_row_on_its_own(tokenizer):
    import time

    reader = tiny_reader(tokenizer)
    no_words = [[[]] * (M // 3)] * 2
    with torch.no_grad():  # two rows of one length: the same question over other pages, compressed
        embeds = torch.stack([reader.build("Which year?", c, torch.zeros(c.shape[:2], dtype=torch.bool), no_words,
                                           ANSWER_SUFFIX).embeds
                              for c in (reader.chunks(pages(2, seed=s)) for s in (1, 2))])
        start = time.perf_counter()
        rows, ttft, tpot = reader.decode_batch(embeds, 6, start, stop=False)
        alone = [reader.decode(e, 6, start, stop=False)[0] for e in embeds]
    assert rows == alone and all(len(r) == 6 for r in rows) and 0 < ttft and 0 < tpot
    reader.stop_ids = {rows[0][2]}  # row 0 stops by its third token, row 1 only where it meets that token

    def until_stop(row: list[int]) -> list[int]:
        ends = [i for i, t in enumerate(row) if t in reader.stop_ids or "\n" in tokenizer.decode([t])]
        return row[:ends[0]] if ends else row

    with torch.no_grad():
        cut, _, _ = reader.decode_batch(embeds, 6, start, stop=True)
    assert cut == [until_stop(r) for r in rows] and len(cut[0]) <= 2


def test_the_reader_leaves_the_decoder_it_is_given_without_lora(tokenizer):
    """LoRA goes into the reader's own modules over the same tensors: the caller's decoder (a chat
    model's, say) is untouched."""
    decoder = tiny_llama(tokenizer, num_hidden_layers=1).eval()
    config = ReaderConfig(token_dim=D, question_dim=Q, hidden=32, projector_hidden=48, selector_dim=32,
                          selector_heads=8, selector_ff=32, lora_r=4, lora_alpha=8)
    reader = DocRefragReader(decoder, tokenizer, config, lambda texts: np.zeros((len(texts), Q)))
    assert not any("lora_" in n for n, _ in decoder.named_parameters())
    assert type(decoder.model.layers[0].self_attn.q_proj) is torch.nn.Linear
    shared = reader.decoder.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
    assert shared is decoder.model.layers[0].self_attn.q_proj.weight
    reader.train()
    assert not decoder.training


def test_relevance_is_a_probability_per_page_and_batches_agree(tokenizer):
    reader = tiny_reader(tokenizer)
    tokens = pages(5)
    together = reader.relevance("Which page?", tokens, batch=5)
    apart = reader.relevance("Which page?", tokens, batch=2)
    assert len(together) == 5 and all(0.0 < s < 1.0 for s in together)
    np.testing.assert_allclose(together, apart, rtol=1e-4, atol=1e-5)


def test_gradients_reach_projector_selector_and_lora(tokenizer):
    reader = tiny_reader(tokenizer)
    tokens = pages(2)
    chunks = reader.chunks(tokens)
    # make the LoRA B matrices non-zero so A receives gradient too (B starts at zero by design)
    for name, p in reader.decoder.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    torch.nn.init.normal_(reader.selector.head.weight, std=0.02)  # zero at first too: the policy starts as similarity
    expand = reader.select("q", chunks, 0.3)
    assert expand.any()
    _, regions = native_regions(reader, 2)
    loss = reader.answer_loss("How many?", tokens, expand, regions, "42")
    logits = reader.selector(reader.question_vector("How many?"), chunks.reshape(-1, 3, D))
    loss = loss + draw_log_probs(logits, sample_selection(logits, 4)).sum()
    loss.backward()
    for group, params in reader.trainable().items():
        assert params and all(p.grad is not None and p.grad.abs().sum() > 0 for p in params), group
    frozen = [p for n, p in reader.decoder.named_parameters() if "lora_" not in n]
    assert frozen and all(p.grad is None and not p.requires_grad for p in frozen)


def test_selector_has_under_a_million_parameters_at_the_default_size():
    assert sum(p.numel() for p in ChunkSelector(ReaderConfig()).parameters()) < 1_000_000


def test_plackett_luce_probabilities_sum_to_one_and_samples_are_distinct():
    logits = torch.tensor([0.3, -1.0, 2.0, 0.0])
    total = sum(draw_log_probs(logits, torch.tensor(s)).sum().exp() for s in itertools.permutations(range(4), 2))
    assert float(total) == pytest.approx(1.0, abs=1e-6)
    draw = sample_selection(torch.zeros(50), 10, torch.Generator().manual_seed(0))
    assert draw.unique().numel() == 10


def test_grpo_sampling_stays_on_the_policy_device():
    """The GPU path without a GPU: a CPU tensor meeting one on torch's meta device raises, as it does on
    cuda; stage 3 samples selections with a CPU generator from logits on the training device."""
    config = ReaderConfig()
    selector = ChunkSelector(config).to("meta")
    logits = selector(torch.zeros(config.question_dim, device="meta"), torch.zeros(40, config.k, config.token_dim,
                                                                                   device="meta"))
    draw = sample_selection(logits, 6, torch.Generator().manual_seed(0))
    assert draw.device.type == "meta" and draw.shape == (6,)
    for selection in (draw, torch.tensor([3, 1, 2])):  # a selection made on the CPU is moved, not mixed
        log_p = draw_log_probs(logits, selection)
        assert log_p.device.type == "meta" and log_p.shape == selection.shape


def test_a_reader_config_that_does_not_fit_the_decoder_is_refused(tokenizer):
    decoder = tiny_llama(tokenizer, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1)
    with pytest.raises(ValueError, match="hidden size is 16"):
        DocRefragReader(decoder, tokenizer, ReaderConfig(), lambda t: np.zeros((len(t), 384)))
    with pytest.raises(ValueError, match="k=5"):
        ReaderConfig(k=5)


def test_a_checkpoint_round_trips_and_refuses_corruption_and_mismatches(tokenizer, tmp_path):
    from docrefrag.core.checkpoint import CheckpointError, load_checkpoint, read_checkpoint_config, save_checkpoint

    trained = tiny_reader(tokenizer, seed=0)
    for name, p in trained.decoder.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    stages = [{"stage": "stage1", "steps": 3, "seed": 0, "command": "docrefrag train stage1", "minutes": 0.1}]
    path = save_checkpoint(trained, tmp_path / "ckpt", "enc-a", stages)
    assert read_checkpoint_config(path)["stages"] == stages
    fresh = tiny_reader(tokenizer, seed=0)  # the same decoder, untrained parts
    tokens = pages(2)
    assert not torch.allclose(fresh.yes_logits("q", tokens), trained.yes_logits("q", tokens))
    load_checkpoint(fresh, path, "enc-a")
    for part in ("norm", "projector", "selector"):  # stored in float16, loaded into float32
        for (name, a), b in zip(getattr(fresh, part).named_parameters(), getattr(trained, part).parameters(),
                                strict=True):
            assert torch.equal(a, b.half().float()), name
    torch.testing.assert_close(fresh.yes_logits("q", tokens), trained.yes_logits("q", tokens), atol=1e-2, rtol=1e-2)
    with pytest.raises(CheckpointError, match="encoder 'enc-a'"):
        load_checkpoint(fresh, path, "enc-b")
    with pytest.raises(CheckpointError, match="does not match its sha256"):
        (path / "reader.safetensors").write_bytes(b"garbage")
        read_checkpoint_config(path)
    save_checkpoint(trained, path, "enc-a", stages)  # overwriting replaces the whole directory
    other = DocRefragReader(tiny_llama(tokenizer, num_hidden_layers=3), tokenizer, trained.config,
                            lambda t: np.zeros((len(t), Q)))
    with pytest.raises(CheckpointError, match="decoder"):
        load_checkpoint(other, path, "enc-a")
    with pytest.raises(CheckpointError, match="no reader checkpoint"):
        read_checkpoint_config(tmp_path / "nowhere")
    manifest = path / "manifest.json"
    for damaged in (manifest.read_text()[:40], '{"stages": []}', '{"files": ["config.json"]}'):
        manifest.write_text(damaged)  # cut short, or not the manifest's shape
        with pytest.raises(CheckpointError, match="manifest.json is damaged.*save or copy it again"):
            read_checkpoint_config(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary directories left


def test_reader_evaluations_run_on_noisy_sequences(tokenizer):
    """docrefrag.evals.reader_evals on a tiny reader: the selector comparison has a row per (p, selector) and the
    answer loss is a positive cross-entropy over every sequence."""
    from types import SimpleNamespace

    from docrefrag.core.page import Word
    from docrefrag.evals.reader_evals import answer_loss, selectors

    reader = tiny_reader(tokenizer)
    seqs = [SimpleNamespace(question=f"How many units in row {i}?", answer=str(10 + i), answer_format="Int",
                            pages=[("d", 1), ("d", 2)]) for i in range(3)]
    record = SimpleNamespace(width=60.0, height=60.0, words=[Word(f"units{c}", 10 * c + 1, 10 * r + 1, 10 * c + 9,
                                                                  10 * r + 9, r) for r in range(6) for c in range(6)])

    def pages_of(keys):  # a 6x6 grid of 60 x 60 pages, a word in every cell
        return pages(len(keys)), [record] * len(keys)

    with torch.no_grad():
        rows = selectors(reader, seqs, pages_of, ps=(0.1, 0.2))
        loss = answer_loss(reader, seqs, pages_of)
    assert [(r["p"], r["selector"]) for r in rows] == [(p, s) for p in (0.1, 0.2)
                                                       for s in ("random", "similarity", "trained (GRPO)")]
    assert all(r["questions"] == 3 and 0.0 <= r["accuracy"] <= 1.0 and r["select_ms_p50"] >= 0 for r in rows)
    assert [r["selector"] for r in loss] == ["none", "random", "similarity", "trained (GRPO)", "all"]
    assert all(r["questions"] == 3 == len(r["per_question"]) and r["answer_nll_mean"] > 0 for r in loss)
    bounds = {r["selector"]: r["per_question"] for r in loss if r["p"] is None}
    assert bounds["none"] != bounds["all"]  # expanding every chunk changes what the reader reads
    rand = next(r for r in loss if r["selector"] == "random")
    assert rand["minus_random"] == 0.0 == rand["minus_random_se"]
    for r in loss:  # the paired difference is that of the per-question losses
        assert r["minus_random"] == pytest.approx(np.mean(np.subtract(r["per_question"], rand["per_question"])),
                                                  abs=2e-4)


def test_native_expansion_holds_the_decoders_own_embeddings_of_the_regions_words(tokenizer):
    reader = tiny_reader(tokenizer, k=3, p=0.5)
    tokens = pages(2)
    chunks = reader.chunks(tokens)
    words, regions = native_regions(reader, 2)
    seq = reader.build("revenue?", chunks, reader.select("revenue?", chunks, 0.5), regions, ANSWER_SUFFIX)
    expand = seq.expanded
    table = reader.decoder.get_input_embeddings().weight
    comp = reader.projector(chunks)
    assert expand.any() and not expand.all()
    for i, j in itertools.product(range(2), range(M // 3)):
        at = ((seq.page == i) & (seq.chunk == j)).nonzero().flatten()
        if expand[i, j]:  # exactly the decoder's embeddings of the region's ids, which decode to its words
            ids = regions[i][j]
            assert torch.equal(seq.embeds[at], table[torch.tensor(ids)])
            assert seq.slot[at].tolist() == list(range(len(ids)))
            assert tokenizer.decode(ids).split() == words[i][j]
        else:  # one compressed embedding
            assert at.numel() == 1 and seq.slot[at].item() == -1
            assert torch.allclose(seq.embeds[at[0]], comp[i, j])


def test_chunks_without_words_stay_compressed_and_the_token_cap_holds(tokenizer):
    from dataclasses import replace

    reader = tiny_reader(tokenizer, k=3, p=1.0)
    chunks = reader.chunks(pages(2))
    _, regions = native_regions(reader, 2)
    everything = torch.ones(chunks.shape[:2], dtype=torch.bool)
    kept = reader.native_mask(everything, regions)
    assert all(not kept[i, j] for i in range(2) for j in range(M // 3) if not regions[i][j])
    assert all(kept[i, j] for i in range(2) for j in range(M // 3) if regions[i][j])
    cap = 20
    reader.config = replace(reader.config, max_expanded_tokens=cap)
    capped = reader.native_mask(everything, regions)
    spent = sum(len(regions[i][j]) for i, j in capped.nonzero().tolist())
    assert 0 < spent <= cap
    first = capped.nonzero().tolist()  # page order: the first chunks with words are the ones kept
    assert first[0] == [0, 0]
    out = reader.answer("revenue?", pages(2), regions, p=1.0, max_new_tokens=3)
    assert sum(len(regions[i][j]) for i, j in out.expanded) <= cap
    assert all(regions[i][j] for i, j in out.expanded)


def test_region_words_follow_the_cells_of_the_word_centres_in_reading_order():
    from docrefrag.core.chunking import region_words
    from docrefrag.core.page import Word

    # a 6x6 grid over a 60 x 60 page, k = 3: chunk 0 = cells 0-2 (x < 30 of row 0), chunk 1 = cells 3-5
    words = [Word("b", 12, 2, 18, 8, 0), Word("a", 1, 1, 5, 5, 0), Word("c", 40, 2, 50, 8, 0),
             Word("d", 55, 55, 59, 59, 1)]
    regions = region_words(words, 60, 60, 6, 3)
    assert len(regions) == 12
    assert regions[0] == ["b", "a"] and regions[1] == ["c"] and regions[11] == ["d"]
    assert sum(map(len, regions)) == 4


def test_the_reward_is_the_gold_answers_mean_token_log_probability(tokenizer):
    """Hand-computed: one decoder pass per answer token over the growing prefix, the log-softmax of the
    token that comes next, averaged; the reward takes one teacher-forced pass."""
    reader = tiny_reader(tokenizer).eval()
    chunks = reader.chunks(pages(2))
    _, regions = native_regions(reader, 2)
    with torch.no_grad():
        seq = reader.build("How much revenue?", chunks, reader.select("How much revenue?", chunks, 0.3), regions,
                           ANSWER_SUFFIX)
        ids = tokenizer(" 1,250 dollars", add_special_tokens=False)["input_ids"]
        table = reader.decoder.get_input_embeddings()
        prefix, logps = seq.embeds, []
        for token in ids:
            logits = reader.decoder(inputs_embeds=prefix[None]).logits[0, -1]  # (vocab,)
            logps.append(float(torch.log_softmax(logits, -1)[token]))
            prefix = torch.cat([prefix, table(torch.tensor([token]))])
        reward = reader.answer_reward(seq, "1,250 dollars")
        other = reader.answer_reward(reader.build("How much revenue?", chunks, torch.zeros(2, M // 3, dtype=torch.bool),
                                                  regions, ANSWER_SUFFIX), "1,250 dollars")
    assert len(ids) > 1
    assert reward == pytest.approx(sum(logps) / len(logps), abs=1e-5)
    assert reward < 0 and other != pytest.approx(reward, abs=1e-6)  # what is expanded changes the reward


def test_a_checkpoint_with_the_retired_aligner_loads_without_it(tmp_path):
    """A checkpoint saved before the token aligner was retired still holds its weights: they are not read."""
    import hashlib
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from docrefrag.core.checkpoint import read_checkpoint_config
    from docrefrag.core.reader import DEFAULT_CHECKPOINT, load_reader

    old = tmp_path / "old"
    shutil.copytree(DEFAULT_CHECKPOINT, old)
    tensors = load_file(old / "reader.safetensors")
    stored = {k: v for k, v in tensors.items() if k.startswith("selector.")}
    save_file({**tensors, "aligner.net.0.weight": torch.zeros(4, 4, dtype=torch.float16)}, old / "reader.safetensors")
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["files"]["reader.safetensors"] = hashlib.sha256((old / "reader.safetensors").read_bytes()).hexdigest()
    (old / "manifest.json").write_text(json.dumps(manifest))

    reader = load_reader(old, embed_question=lambda texts: np.zeros((len(texts), 384)),
                         encoder_id=read_checkpoint_config(old)["encoder_id"])
    assert stored and all(torch.equal(reader.get_parameter(k), v.float()) for k, v in stored.items())
    assert "aligner" not in dict(reader.named_children())


def test_the_shipped_checkpoint_names_its_grpo_stage():
    from docrefrag.core.checkpoint import read_checkpoint_config
    from docrefrag.core.reader import DEFAULT_CHECKPOINT

    stages = [s["stage"] for s in read_checkpoint_config(DEFAULT_CHECKPOINT)["stages"]]
    assert stages[-2:] == ["warmstart", "stage3"]  # the selector's warm start on chunk labels, then GRPO


def test_recall_is_the_share_of_the_labelled_chunks_among_those_expanded(tokenizer):
    from docrefrag.core.train_data import Example
    from docrefrag.evals.reader_evals import recall

    class FirstPageChunkOne:
        def choose(self, question, chunks, T):
            return torch.tensor([1])

    reader = tiny_reader(tokenizer)
    examples = [Example("qa", "q?", [("d", 1), ("d", 2)], "1", labels=[(0, 1), (1, 4)]),
                Example("qa", "q?", [("d", 1)], "1", labels=[(0, 1)])]
    rows = recall(reader, examples, lambda keys: pages(len(keys)),
                  {"all": AllSelector(), "none": NoneSelector(), "one": FirstPageChunkOne()}, ps=(0.2,))
    assert {r["selector"]: r["recall"] for r in rows} == {"all": 1.0, "none": 0.0, "one": 0.75}
    assert all(r["examples"] == 2 and r["p"] == 0.2 for r in rows)


def test_expanded_chunks_of_one_band_are_read_back_in_reading_order(tokenizer):
    # k = 3 on a 6x6 grid: chunks 0 and 1 share the first row (band). Their words interleave on the page,
    # as the left and right halves of the same lines do: "alpha" (chunk 0) "beta" (chunk 1) "gamma" (0) "delta" (1)
    reader = tiny_reader(tokenizer, k=3)
    chunks = reader.chunks(pages(1))
    L = M // 3
    text = ["alpha", "beta", "gamma", "delta"]
    regions = [reader.region_ids(text, [[0, 2], [1, 3]] + [[] for _ in range(L - 2)])]
    expand = torch.zeros(1, L, dtype=torch.bool)
    expand[0, :2] = True
    seq = reader.build("q", chunks, expand, regions, ANSWER_SUFFIX)
    at = (seq.page == 0) & (seq.slot >= 0)
    ids = seq.embeds[at] @ reader.decoder.get_input_embeddings().weight.T  # the nearest token of each embedding
    assert tokenizer.decode(ids.argmax(-1)).split() == text
    assert seq.chunk[at].tolist()[0] == 0 and set(seq.chunk[at].tolist()) == {0, 1}


def test_words_compression_averages_the_regions_words_and_leaves_out_empty_chunks(tokenizer):
    from dataclasses import replace

    reader = tiny_reader(tokenizer, k=3)
    reader.config = replace(reader.config, compression="words")
    chunks = reader.chunks(pages(2))
    L = M // 3
    _, regions = native_regions(reader, 2)  # every third chunk has no words
    present = reader.present(regions)
    assert present.sum() == sum(bool(ids) for page in regions for ids in page)
    expand = reader.select("revenue?", chunks, 0.2, present=present)
    assert int(expand.sum()) == budget(0.2, 1, int(present.sum())) and not (expand & ~present).any()
    seq = reader.build("revenue?", chunks, expand, regions, ANSWER_SUFFIX)
    table = reader.decoder.get_input_embeddings().weight
    for i, j in itertools.product(range(2), range(L)):
        at = ((seq.page == i) & (seq.chunk == j)).nonzero().flatten()
        if not regions[i][j]:
            assert at.numel() == 0  # nothing to read: not in the input
        elif not expand[i, j]:
            assert at.numel() == 1
            torch.testing.assert_close(seq.embeds[at[0]], table[torch.tensor(regions[i][j])].mean(0))
    out = reader.answer("revenue?", pages(2), regions, max_new_tokens=3, stop=False)
    assert out.input_tokens == seq.embeds.shape[0] and out.output_tokens == 3
    scores = reader.relevance("revenue?", pages(2), regions)
    assert len(scores) == 2 and all(0 < s < 1 for s in scores)
    with pytest.raises(ValueError, match="pass regions"):
        reader.relevance("revenue?", pages(2))


def test_the_words_reader_takes_the_checkpoints_selector_over_another_decoder(tokenizer, tmp_path):
    from docrefrag.core.checkpoint import read_checkpoint_config
    from docrefrag.core.reader import DEFAULT_CHECKPOINT, load_words_reader

    tiny_llama(tokenizer, seed=0).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    shipped = read_checkpoint_config(DEFAULT_CHECKPOINT)
    reader = load_words_reader(DEFAULT_CHECKPOINT, tmp_path, embed_question=lambda texts: np.zeros((len(texts), 384)),
                               encoder_id=shipped["encoder_id"])
    assert reader.config.compression == "words" and reader.config.hidden == 32
    assert not any("lora_" in name for name, _ in reader.decoder.named_parameters())
    from safetensors.torch import load_file

    saved = load_file(DEFAULT_CHECKPOINT / "reader.safetensors")
    for name, value in reader.selector.state_dict().items():
        torch.testing.assert_close(value, saved[f"selector.{name}"].float())
    with pytest.raises(Exception, match="encoder"):
        load_words_reader(DEFAULT_CHECKPOINT, tmp_path, embed_question=lambda texts: np.zeros((len(texts), 384)),
                          encoder_id="another-encoder")


def test_a_grafted_selector_joins_the_projector_and_lora_of_the_checkpoint_it_is_shipped_into(tokenizer, tmp_path):
    from dataclasses import replace

    from safetensors.torch import load_file

    from docrefrag.core.checkpoint import CheckpointError, graft_selector, read_checkpoint_config, save_checkpoint

    shipped, trained = tiny_reader(tokenizer, seed=0), tiny_reader(tokenizer, seed=1)
    into = save_checkpoint(shipped, tmp_path / "shipped", "enc", [{"stage": "stage2"}])
    source = save_checkpoint(trained, tmp_path / "trained", "enc", [{"stage": "warmstart"}, {"stage": "stage3"}])
    graft_selector(source, into)
    parts, theirs = (load_file(p / "reader.safetensors") for p in (into, source))
    assert all(torch.equal(parts[k], theirs[k]) for k in parts if k.startswith("selector."))
    assert all(torch.equal(parts[k], v.detach().half()) for k, v in
               {f"projector.{n}": p for n, p in shipped.projector.state_dict().items()}.items())
    assert [s["stage"] for s in read_checkpoint_config(into)["stages"]] == ["warmstart", "stage3"]
    other = tiny_reader(tokenizer)
    other.config = replace(other.config, selector_ff=64)
    with pytest.raises(CheckpointError, match="does not fit"):
        graft_selector(save_checkpoint(other, tmp_path / "other", "enc", []), into)

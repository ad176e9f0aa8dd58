"""A decoder stored in bfloat16 runs with int8 linear layers on a CPU without bfloat16 instructions
(`decoding.cpu_form`, `docrefrag.core.int8`): its outputs stay close to float32's, a later process builds it
from the cached int8 file without quantising again, and a cache made from other weights, or damaged, is
rebuilt. A tiny Llama (random weights, no tokenizer) stands in for the decoder."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from docrefrag.core import decoding, int8

pytestmark = pytest.mark.skipif(not int8.supported(), reason="this torch has no fbgemm int8 matrix products")

IDS = torch.tensor([[1, 50, 60, 70, 80, 90, 11, 12]])


def tiny(folder, seed: int) -> LlamaForCausalLM:
    """A seeded tiny Llama saved to `folder` in bfloat16, as the dequantised registry decoders are; returned
    in float32 (the same bfloat16 values)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         eos_token_id=2, tie_word_embeddings=True)).to(torch.bfloat16)
    model.save_pretrained(folder)
    return model.float().eval()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCREFRAG_CACHE", str(tmp_path / "cache"))
    return tmp_path / "model"


def logits(model: nn.Module) -> torch.Tensor:
    with torch.inference_mode():
        return model(IDS).logits[0]


def test_an_int8_linear_layer_computes_what_the_float32_one_does():
    torch.manual_seed(0)
    linear = nn.Linear(96, 40)
    x = torch.randn(3, 5, 96)
    exact, approx = linear(x), int8.Int8Linear.from_linear(linear)(x)
    assert approx.shape == exact.shape
    assert (approx - exact).abs().max() < 0.03 * exact.abs().max()


def test_the_int8_decoder_reads_as_the_float32_one_and_a_later_process_builds_it_from_the_cache(folder,
                                                                                            monkeypatch):
    reference = tiny(folder, seed=0)
    model = int8.load(folder, torch.bfloat16)
    layers = dict(model.named_modules())
    assert {name for name, m in layers.items() if type(m) is nn.Linear} == {f"model.layers.{i}.mlp.down_proj"
                                                                         for i in range(2)}
    assert sum(isinstance(m, int8.Int8Linear) for m in layers.values()) == 2 * 6 + 1  # the head too
    exact, approx = logits(reference), logits(model)
    assert (approx - exact).abs().max() < 0.05 * exact.abs().max()
    assert torch.equal(approx.argmax(-1), exact.argmax(-1))
    assert int8.cache_file(folder).is_file()

    def no_quantising(_model):
        raise AssertionError("quantised again although the cache holds these weights")

    monkeypatch.setattr(int8, "quantise", no_quantising)
    again = int8.load(folder, torch.bfloat16)
    assert torch.equal(logits(again), approx)
    assert again.generation_config.eos_token_id == 2  # the folder's, which decoding stops on


def test_a_cache_of_other_weights_or_a_damaged_one_is_rebuilt(folder):
    tiny(folder, seed=0)
    first = logits(int8.load(folder, torch.bfloat16))
    newer = tiny(folder, seed=1)  # the folder's weights rewritten
    rebuilt = logits(int8.load(folder, torch.bfloat16))
    assert not torch.equal(rebuilt, first)
    assert (rebuilt - logits(newer)).abs().max() < 0.05 * logits(newer).abs().max()
    file = int8.cache_file(folder)
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])  # an interrupted copy
    assert torch.equal(logits(int8.load(folder, torch.bfloat16)), rebuilt)


@pytest.mark.parametrize(("native", "fbgemm", "form"), [(True, True, torch.bfloat16), (False, True, "int8"),
                                                        (False, False, torch.float32)])
def test_bfloat16_weights_run_in_bfloat16_int8_or_float32_as_the_cpu_computes_fastest(folder, monkeypatch,
                                                                                     native, fbgemm, form):
    monkeypatch.setattr(decoding, "native_bf16", lambda: native)
    monkeypatch.setattr(int8, "supported", lambda: fbgemm)
    assert decoding.cpu_form(torch.bfloat16) == form
    assert decoding.cpu_form(torch.float32) == torch.float32 and decoding.cpu_form(None) is None


def test_a_shared_weights_copy_of_the_int8_decoder_shares_its_packed_weights(folder):
    """The reader's module tree over the chat model's decoder (`decoding.shared_weights_copy`) holds no second
    copy of the int8 weights, and reads the same."""
    tiny(folder, seed=0)
    model = int8.load(folder, torch.bfloat16)
    copy = decoding.shared_weights_copy(model)
    layers = [(a, b) for a, b in zip(model.modules(), copy.modules(), strict=True) if isinstance(a, int8.Int8Linear)]
    assert layers and all(a is not b and a.packed is b.packed for a, b in layers)
    assert torch.equal(logits(copy), logits(model))


def test_a_cache_that_cannot_be_written_costs_the_quantising_again_not_the_answer(folder, monkeypatch, tmp_path):
    """A read-only or full cache dir: the decoder still loads in int8, and no file is left half-written."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    monkeypatch.setenv("DOCREFRAG_CACHE", str(blocker))
    reference = tiny(folder, seed=0)
    model = int8.load(folder, torch.bfloat16)
    assert (logits(model) - logits(reference)).abs().max() < 0.05 * logits(reference).abs().max()
    assert blocker.read_text() == "a file where the cache dir should be"

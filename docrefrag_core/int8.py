"""A decoder's linear layers in int8, for a CPU without bfloat16 instructions: quantised once, cached.

On an AVX2-only CPU the 1.5B decoder prefills 1.2-1.5x and decodes 2.2x faster, and `ask` answers 1.7x sooner,
when its linear layers (all but the MLP's output projection, `FLOAT32_LAYERS`) multiply in int8 (fbgemm's dynamic
quantisation: each weight row int8 with a scale of its own, the activations quantised per call) than in float32,
with the same stated-facts accuracy
(docs/decisions/answers.md, "Int8 on a CPU without bfloat16 instructions"). Quantising takes
about 40 s, more than loading, so `load(path)` keeps the result as one safetensors file in the cache dir
(`<cache>/int8/`, keyed by the model folder) and later processes build the model from it: the int8 rows
and their scales, the other weights (embeddings, norms) in the dtype the folder stores them. The file
records what it was made from (the weight files' sizes and times, torch's version); anything else in its
place is rebuilt. The embeddings stay in float32, so a reader that feeds the decoder embeddings
(`inputs_embeds`) reads the same table as the chat model.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import time
import warnings
from pathlib import Path

import torch
from torch import nn

logger = logging.getLogger(__name__)

FORMAT = "docrefrag-int8-2"
# Layers kept in float32: the MLP's output projection. Its inputs (the gated activations, 8,960 wide in the 1.5B
# decoder) carry outliers in every layer that one activation scale per call cannot hold: quantising it too moved
# the next-token distribution 13x further from float32's (KL 0.70 against 0.053 on real answer prompts) and cost
# 0.15 of the stated-facts accuracy; keeping it in float32 costs a fifth of the speed-up.
FLOAT32_LAYERS = ("down_proj",)


@functools.cache
def supported() -> bool:
    """Whether this torch computes fbgemm's int8 matrix products (x86 builds of torch 2.13 do; torch has
    announced the end of its quantised tensors, and a torch without them runs the decoder in float32)."""
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    try:
        Int8Linear.from_linear(nn.Linear(4, 2))(torch.ones(1, 4))
    except (RuntimeError, AttributeError, NotImplementedError) as e:
        logger.info("no int8 matrix products in this torch (%s): the decoder runs in float32", e)
        return False
    return True


class Int8Linear(nn.Module):
    """`nn.Linear` with int8 weights (symmetric, one scale per output row) and float32 inputs and outputs."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        with warnings.catch_warnings():  # torch 2.13 warns that quantised tensors will go: `supported` checks
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch._make_per_channel_quantized_tensor(
                weight, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0)
            self.packed = torch.ops.quantized.linear_prepack(qweight, None if bias is None else bias.float())

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
        weight = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        return cls(weight, scale, None if linear.bias is None else linear.bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x.float(), self.packed, True)  # reduce_range, as fbgemm needs

    def tensors(self, name: str) -> dict[str, torch.Tensor]:
        """What rebuilds this layer, as tensors named after it (read back from the packed weights, the
        layer's only copy)."""
        qweight, bias = torch.ops.quantized.linear_unpack(self.packed)
        parts = {"int8": qweight.int_repr(), "scale": qweight.q_per_channel_scales().float(), "bias": bias}
        return {f"{name}.{k}": v for k, v in parts.items() if v is not None}


def quantise(model: nn.Module) -> nn.Module:
    """`model` with every nn.Linear but `FLOAT32_LAYERS` replaced by an Int8Linear of its weights (in place)."""
    for name in quantised_layers(model):
        model.set_submodule(name, Int8Linear.from_linear(model.get_submodule(name)))
    return model


def quantised_layers(model: nn.Module) -> list[str]:
    """The names of the nn.Linear layers of `model` that run in int8."""
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.rpartition(".")[2] not in FLOAT32_LAYERS]


def load(path: Path, stored: torch.dtype | None) -> nn.Module:
    """The causal LM at `path` (a Hugging Face folder whose weights are `stored`, as its config states) in
    eval mode with int8 linear layers: from the cache when it holds this folder's weights, else loaded in
    float32, quantised and cached."""
    cached, source = cache_file(path), fingerprint(path)
    if cached.is_file():
        try:
            return _from_cache(path, cached, source)
        except Exception as e:  # a stale, truncated or foreign file: rebuilt below
            logger.info("rebuilding %s (%s)", cached, (str(e).splitlines() or [type(e).__name__])[0])
    from transformers import AutoModelForCausalLM

    logger.warning("this CPU has no bfloat16 instructions: quantising the decoder at %s to int8 once (about a "
                   "minute); later runs load it from %s", path, cached)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    quantise(model.eval())
    logger.info("quantised %s to int8 in %.1f s (cached for later processes)", path, time.perf_counter() - t0)
    _save(model, cached, source, stored or torch.float32)
    return model


def cache_file(path: Path) -> Path:
    from docrefrag.core.weights import cache_dir

    return cache_dir() / "int8" / f"{hashlib.sha256(str(path).encode()).hexdigest()[:16]}.safetensors"


def fingerprint(path: Path) -> str:
    """What an int8 file of `path` was made from: the folder, its weight files' sizes and times, torch."""
    stats = {p.name: p.stat() for p in sorted(path.glob("*.safetensors"))}
    files = {name: [st.st_size, st.st_mtime_ns] for name, st in stats.items()}
    return json.dumps({"format": FORMAT, "path": str(path), "files": files, "torch": torch.__version__},
                      sort_keys=True)


def _save(model: nn.Module, file: Path, source: str, stored: torch.dtype) -> None:
    """Write the int8 layers and the other weights (in `stored`, the folder's own dtype: no precision lost)
    atomically: a crash leaves the old file or none."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if isinstance(module, Int8Linear):
            tensors |= module.tensors(name)
    tensors |= {name: p.detach().to(stored) for name, p in model.named_parameters()}
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata={"source": source})
        os.replace(tmp, file)
    except OSError as e:  # a full or read-only cache: the next process quantises again
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        logger.warning("could not cache the int8 weights at %s (%s)", file, e)


def _from_cache(path: Path, file: Path, source: str) -> nn.Module:
    from accelerate import init_empty_weights
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    with safe_open(file, "pt") as f:
        if (f.metadata() or {}).get("source") != source:
            raise ValueError("made from other weights")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for name in quantised_layers(model):
        model.set_submodule(name, Int8Linear(tensors.pop(f"{name}.int8"), tensors.pop(f"{name}.scale"),
                                             tensors.pop(f"{name}.bias", None)))
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True, assign=True)
    if (path / "generation_config.json").is_file():  # the end-of-sequence ids that decoding stops on
        model.generation_config = GenerationConfig.from_pretrained(path, local_files_only=True)
    return model.eval()

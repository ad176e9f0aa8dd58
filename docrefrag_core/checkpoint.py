"""Reader checkpoints: the trained parts of a `DocRefragReader` as one versioned directory.

    <dir>/config.json     format version, the ReaderConfig, the encoder and decoder it was trained
                          for, and the record of every training stage (data, steps, seed, command,
                          minutes)
    <dir>/reader.safetensors   token norm, projector, selector (float16); a checkpoint saved
                          before the token aligner was retired also holds its weights, never read
    <dir>/lora.safetensors     the decoder's LoRA adapters (float16)
    <dir>/manifest.json   sha256 of every file above

Saving writes a sibling temporary directory and renames it into place, so an interrupted save
never leaves a half-written checkpoint. Weights are stored in float16 (a shipped checkpoint stays a
few MB; a training stage resumes from its own float32 state, not from the checkpoint) and loaded
into the reader's float32 parameters. Loading verifies every sha256 and refuses a checkpoint
made for another page encoder or decoder, naming both.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from docrefrag.core.config import ReaderConfig
from docrefrag.core.weights_verify import sha256_file

FORMAT = 1
MANIFEST = "manifest.json"
FILES = ("config.json", "reader.safetensors", "lora.safetensors")
PARTS = ("norm", "projector", "selector")
DECODER_FREE = ("norm", "selector")  # the parts a reader over another decoder (words compression) takes


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, corrupted, or made for another encoder or decoder."""


def save_checkpoint(reader, path: Path | str, encoder_id: str, stages: list[dict]) -> Path:
    parts = {f"{part}.{k}": v.detach().to(torch.float16).contiguous() for part in PARTS
             for k, v in getattr(reader, part).state_dict().items()}
    lora = {n: p.detach().to(torch.float16).contiguous() for n, p in reader.decoder.named_parameters() if "lora_" in n}
    config = {"format": FORMAT, "reader": asdict(reader.config), "encoder_id": encoder_id,
              "decoder_id": reader.decoder_id, "decoder_path": reader.decoder_path,  # None: the default decoder
              "stages": stages}
    return _write(Path(path), parts, lora, config)


def graft_selector(source: Path | str, into: Path | str) -> Path:
    """Give the checkpoint `into` the selector of `source` and `source`'s stage record: a selector trained
    over another decoder (words compression reads no projector or LoRA) shipped beside the projector and
    LoRA of `into`'s own decoder. Both must read the same page tokens with the same selector shape."""
    theirs, ours = read_checkpoint_config(source), read_checkpoint_config(into)
    shape = ("k", "token_dim", "question_dim", "selector_dim", "selector_heads", "selector_layers", "selector_ff")
    if theirs["encoder_id"] != ours["encoder_id"] or any(theirs["reader"][f] != ours["reader"][f] for f in shape):
        raise CheckpointError(f"the selector of {source} does not fit {into}: another page encoder or selector shape")
    parts = load_file(Path(into) / "reader.safetensors")
    parts.update({k: v for k, v in load_file(Path(source) / "reader.safetensors").items() if k.startswith("selector.")})
    return _write(Path(into), parts, load_file(Path(into) / "lora.safetensors"), {**ours, "stages": theirs["stages"]})


def _write(path: Path, parts: dict, lora: dict, config: dict) -> Path:
    """A checkpoint directory written beside `path` and renamed into place (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save_file(parts, tmp / "reader.safetensors")
        save_file(lora, tmp / "lora.safetensors")
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        (tmp / MANIFEST).write_text(json.dumps({"files": {f: sha256_file(tmp / f) for f in FILES}}, indent=1))
        tmp.chmod(0o755)  # mkdtemp and safetensors create owner-only files; a checkpoint is shared data
        for f in (*FILES, MANIFEST):
            (tmp / f).chmod(0o644)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old)
        else:
            tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_checkpoint_config(path: Path | str) -> dict:
    """The checkpoint's config.json after checking every file against the manifest."""
    path = Path(path)
    if not (path / MANIFEST).is_file():
        raise CheckpointError(f"no reader checkpoint at {path} (no {MANIFEST}); train one with `docrefrag train` "
                              f"or pass the directory of a saved checkpoint")
    try:
        manifest = json.loads((path / MANIFEST).read_text())["files"]
        if not isinstance(manifest, dict):
            raise TypeError(f"'files' is a {type(manifest).__name__}")
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise CheckpointError(f"reader checkpoint {path}: {MANIFEST} is damaged ({e}); save or copy it again") from e
    for name in FILES:
        if not (path / name).is_file():
            raise CheckpointError(f"reader checkpoint {path} is missing {name}; save or copy it again")
        if sha256_file(path / name) != manifest.get(name):
            raise CheckpointError(f"reader checkpoint {path}: {name} does not match its sha256 in {MANIFEST} "
                                  f"(corrupted or edited); save or copy it again")
    config = json.loads((path / "config.json").read_text())  # its sha256 matched: written by save_checkpoint
    if config.get("format") != FORMAT:
        raise CheckpointError(f"reader checkpoint {path} has format {config.get('format')}, "
                              f"this version reads {FORMAT}")
    return config


def checkpoint_id(path: Path | str) -> str:
    """Names a checkpoint by content (its manifest holds the sha256 of every file), wherever it lies."""
    return sha256_file(Path(path) / MANIFEST)[:16]


def checkpoint_reader_config(path: Path | str) -> ReaderConfig:
    return ReaderConfig(**read_checkpoint_config(path)["reader"])


def load_parts(reader, path: Path | str, encoder_id: str, parts: tuple[str, ...] = DECODER_FREE) -> dict:
    """Load the checkpoint's `parts` into `reader` (default: those that read page tokens, not the
    decoder's embeddings, which serve a reader over any decoder); returns its config."""
    return _load_parts(reader, path, read_checkpoint_config(path), encoder_id, parts)


def _load_parts(reader, path: Path | str, config: dict, encoder_id: str, parts: tuple[str, ...]) -> dict:
    """`load_parts` with the checkpoint's config already read (and its files checked)."""
    if config["encoder_id"] != encoder_id:
        raise CheckpointError(f"reader checkpoint {path} was trained on pages from encoder {config['encoder_id']!r}, "
                              f"but this store's encoder is {encoder_id!r}; use a matching checkpoint or retrain")
    weights = load_file(Path(path) / "reader.safetensors")
    for part in parts:
        prefix = f"{part}."
        module = getattr(reader, part)
        dtype = next(module.parameters()).dtype
        try:
            module.load_state_dict({k[len(prefix):]: v.to(dtype) for k, v in weights.items() if k.startswith(prefix)})
        except RuntimeError as e:  # e.g. a selector saved before its similarity prior
            why = " ".join(str(e).split())[:300]
            raise CheckpointError(f"the {part} of reader checkpoint {path} does not fit this version's reader ({why}); "
                                  "retrain it (`docrefrag train`) or use the checkpoint this version ships") from e
    return config


def load_checkpoint(reader, path: Path | str, encoder_id: str) -> dict:
    """Load the checkpoint at `path` into `reader`; returns its config (with the stage record)."""
    config = read_checkpoint_config(path)
    if config["decoder_id"] != reader.decoder_id:
        raise CheckpointError(f"reader checkpoint {path} was trained for decoder {config['decoder_id']}, not this "
                              f"decoder ({reader.decoder_id}); load the decoder it was trained with or retrain")
    if ReaderConfig(**config["reader"]) != reader.config:
        raise CheckpointError(f"reader checkpoint {path} has ReaderConfig {config['reader']}, the reader was built "
                              f"with {asdict(reader.config)}; build it with checkpoint_reader_config(path)")
    _load_parts(reader, path, config, encoder_id, PARTS)
    lora = load_file(Path(path) / "lora.safetensors")
    params = dict(reader.decoder.named_parameters())
    if set(lora) != {n for n in params if "lora_" in n}:
        raise CheckpointError(f"reader checkpoint {path}: its LoRA adapters do not match the decoder's LoRA layers")
    with torch.no_grad():
        for name, value in lora.items():
            params[name].copy_(value.to(params[name].dtype))
    return config

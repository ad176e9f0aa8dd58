"""The wheel installs one top-level package, `docrefrag`, holding the repository's top-level folders."""

import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

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


def test_a_fresh_venv_gets_one_top_level_package_and_imports_it(wheel, tmp_path):
    """`pip install` of the wheel into a new venv; the dependencies come from this environment's
    site-packages, placed after the venv's own (its .pth files, the editable install's, are not run)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True)
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (record,) = site.glob("docrefrag-*.dist-info/RECORD")
    installed = {line.split("/")[0] for line in record.read_text().splitlines() if not line.startswith("..")}
    assert {name for name in installed if not name.endswith(".dist-info")} == {"docrefrag"}
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = (
        "import importlib.util, docrefrag.agents.llm, docrefrag.core.reader, docrefrag.graph.ask, "
        "docrefrag.evals.harness\n"
        "print(docrefrag.agents.llm.__file__)\n"
        "print(docrefrag.core.reader.DEFAULT_CHECKPOINT.is_dir())\n"
        "print([importlib.util.find_spec(n) for n in ('agents', 'graph', 'indexes', 'evals', 'docrefrag_core')])\n"
    )
    done = subprocess.run([python, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True,
                          env={"PATH": ""})  # away from the repository
    where, checkpoint, others = done.stdout.splitlines()
    assert where.startswith(str(site))
    assert checkpoint == "True"
    assert others == "[None, None, None, None, None]"
    cli = subprocess.run([venv / "bin" / "docrefrag", "models", "list", "--json"], cwd=tmp_path, capture_output=True,
                         text=True, env={"PATH": "", "HOME": str(Path.home())})
    assert cli.returncode in (0, 1), cli.stderr  # 1: some model not fetched
    assert json.loads(cli.stdout)[-1]["path"].startswith(str(site))  # the reader shipped inside the wheel

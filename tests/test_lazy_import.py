"""`import docrefrag` is lazy: the model code (`docrefrag.core`) imports alone, without the face, the
indexes, LangGraph or Qdrant; the public names still come from the package."""

import subprocess
import sys

import pytest
from conftest import REPO, subprocess_env

HIGHER = ("docrefrag.api", "docrefrag.indexes", "langgraph", "qdrant_client")


def imported_modules(statement: str) -> set[str]:
    """The modules `python -X importtime -c statement` imports, in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], cwd=REPO, capture_output=True,
                          text=True, check=True, env=subprocess_env())
    rows = [line.split("|") for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {row[-1].strip() for row in rows[1:]}  # the first row is the header


def loaded(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


def test_the_reader_imports_without_the_face_the_indexes_langgraph_or_qdrant():
    modules = imported_modules("import docrefrag.core.reader")
    assert "docrefrag.core.reader" in modules
    assert {package: loaded(modules, package) for package in HIGHER} == {package: [] for package in HIGHER}


def test_the_package_imports_nothing_until_a_public_name_is_used():
    modules = imported_modules("import docrefrag")
    assert loaded(modules, "docrefrag") == ["docrefrag"]


def test_the_public_names_load_the_api_on_first_use():
    import docrefrag
    from docrefrag import api

    assert docrefrag.DocRefrag is api.DocRefrag
    assert docrefrag.default_store is api.default_store
    assert set(docrefrag.__all__) <= set(dir(docrefrag))


def test_an_unknown_name_is_an_attribute_error():
    import docrefrag

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        docrefrag.Nope  # noqa: B018

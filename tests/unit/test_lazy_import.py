"""`import docrefrag` is lazy: the model code (`docrefrag.core`) imports alone, without the face, the
indexes, LangGraph or Qdrant; the public names still come from the package."""

import json
import subprocess
import sys

import pytest
from conftest import REPO, subprocess_env

HIGHER = ("docrefrag.api", "docrefrag.indexes", "langgraph", "qdrant_client")


def imported_modules(statement: str) -> set[str]:
    """The modules in `sys.modules` after `statement` runs in a fresh interpreter (what `python -X importtime`
    lists, and what its report left out here: docrefrag.core.train among others)."""
    probe = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True,
                          env=subprocess_env())
    return set(json.loads(done.stdout.splitlines()[-1]))


def loaded(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


def test_the_reader_imports_without_the_face_the_indexes_langgraph_or_qdrant():
    modules = imported_modules("import docrefrag.core.reader")
    assert "docrefrag.core.reader" in modules
    assert {package: loaded(modules, package) for package in HIGHER} == {package: [] for package in HIGHER}


def test_no_module_of_the_model_code_imports_a_higher_layer_or_the_orchestration_libraries():
    """docrefrag.core can be trained and tested alone (the layering rule of the architecture)."""
    every = ("import importlib, pkgutil, docrefrag.core\n"
             "for m in pkgutil.iter_modules(docrefrag.core.__path__):\n"
             "    importlib.import_module('docrefrag.core.' + m.name)")
    modules = imported_modules(every)
    higher = (*HIGHER, "docrefrag.graph", "docrefrag.agents", "docrefrag.evals", "langchain_core")
    assert "docrefrag.core.train" in modules
    assert {package: loaded(modules, package) for package in higher} == {package: [] for package in higher}


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

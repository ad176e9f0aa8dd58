"""PyMuPDF, imported without its optional layout model.

`import pymupdf` imports `pymupdf.layout` when the pymupdf-layout package is installed (it is a
dependency of PyMuPDF 2.0), which costs 0.5-1.3 s on 2 cores and loads an ONNX model we do not use:
docrefrag runs pymupdf4llm in legacy mode (the layout model costs ~1 s per page here). Every module
of the project imports PyMuPDF from here (`from docrefrag.core.pdf import pymupdf`).
"""

import sys

if "pymupdf" not in sys.modules:
    sys.modules.setdefault("pymupdf.layout", None)  # makes `import pymupdf.layout` raise ImportError

import pymupdf  # noqa: E402

__all__ = ["pymupdf"]

pymupdf.no_recommend_layout()  # it would print a recommendation to install the model we skip

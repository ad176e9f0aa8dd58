"""What an ingest is given: PDF files, folders of PDFs and folders of page images found under the
paths named, each path that cannot be ingested reported as a failed `IngestResult` with what to do."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from docrefrag.indexes.errors import IngestError
from docrefrag.indexes.pages import IMAGE_SUFFIXES, DocSource, image_folder_source

Status = Literal["added", "replaced", "resumed", "unchanged", "failed"]


@dataclass
class IngestResult:
    source: str
    status: Status
    doc_id: str | None = None
    pages: int = 0
    ocr_pages: int = 0
    failed_pages: int = 0
    seconds: float = 0.0
    message: str = ""
    timings: dict = field(default_factory=dict)


def discover(paths: Iterable[Path | str]) -> tuple[list[DocSource], list[IngestResult]]:
    """PDF files, folders of PDFs (recursively), and folders of page images (one document each)."""
    sources: list[DocSource] = []
    errors: list[IngestResult] = []
    for raw in paths:
        path = Path(raw).expanduser()
        try:
            if path.is_file():
                if path.suffix.lower() != ".pdf":
                    raise IngestError(f"{path}: unsupported file type {path.suffix or '(none)'!r}; docrefrag ingests "
                                      "PDF files and folders of page images (PNG/JPEG): convert it to PDF first")
                sources.append(DocSource("pdf", path.resolve()))
            elif path.is_dir():
                known_errors = len(errors)
                found = _scan_folder(path.resolve(), errors, set())
                if not found and len(errors) == known_errors:
                    raise IngestError(f"{path}: no PDF files or page images in this folder; "
                                      "pass PDF files, folders of PDFs, or folders of PNG/JPEG page images")
                sources.extend(found)
            else:
                raise IngestError(f"{path}: no such file or folder; check the path")
        except IngestError as e:
            errors.append(IngestResult(str(path), "failed", message=str(e)))
        except OSError as e:
            errors.append(IngestResult(str(path), "failed", message=unreadable(path, e)))
    return sources, errors


def unreadable(path: Path | str, error: OSError) -> str:
    """The message of a file or folder the system would not let us read (permissions, a dead link...)."""
    return f"{path}: cannot read it ({error.strerror or error}); check that it exists and is readable"


def _scan_folder(folder: Path, errors: list[IngestResult], seen: set[Path]) -> list[DocSource]:
    """PDFs of the folder and its subfolders; a folder holding page images and no PDF is one document.

    Images next to PDFs (figures, logos) are not pages and are skipped; a broken image folder or an
    unreadable subfolder is reported as its own failure and the scan goes on. A folder reached again
    through a symbolic link (a loop, or two links to one folder) is scanned once.
    """
    real = folder.resolve()
    if real in seen:
        return []
    seen.add(real)
    try:
        entries = sorted(folder.iterdir())
    except OSError as e:
        errors.append(IngestResult(str(folder), "failed", message=unreadable(folder, e)))
        return []
    found = [DocSource("pdf", p) for p in entries if p.is_file() and p.suffix.lower() == ".pdf"]
    if not found and any(p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES for p in entries):
        try:
            found.append(image_folder_source(folder))
        except IngestError as e:
            errors.append(IngestResult(str(folder), "failed", message=str(e)))
    for sub in (p for p in entries if p.is_dir() and not p.name.startswith(".")):
        found += _scan_folder(sub, errors, seen)
    return found

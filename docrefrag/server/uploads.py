"""Uploads to ingest: the multipart body read under a size limit into a temporary folder outside the
store, every file checked as `docrefrag ingest` checks it (its type, a PDF that opens, page images that
read and carry their page numbers), and only then moved into STORE/uploads/, so that a refused upload
writes nothing to the store. A refusal carries the CLI's message for that file, which names the file
as it was uploaded (never a path on the server).

Each PDF is one document; the page images of one request are one document (named by the form field
`name`), as a folder of page images is on the command line.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.datastructures import UploadFile
from starlette.requests import Request

from docrefrag.indexes.discovery import discover
from docrefrag.indexes.errors import IngestError
from docrefrag.indexes.ingest import content_hash
from docrefrag.indexes.pages import IMAGE_SUFFIXES, inspect_source, open_page_image

MAX_FILES = 1000  # page images of one upload, at most
_UNSAFE = re.compile(r"[^\w.() -]+")


class UploadTooLarge(Exception):
    """The body passed the server's upload limit."""


class UploadRefused(Exception):
    """A file of the upload cannot be ingested; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Upload:
    """One document of an upload, checked and waiting in the temporary folder."""

    name: str  # as uploaded (made safe); the document's name in the store
    kind: str  # "pdf" or "images"
    path: Path  # the PDF, or the folder of page images
    doc_id: str  # the id the ingest will give it (content hash)
    n_pages: int
    note: str = ""  # the CLI's warning for it (a repaired PDF, gaps in the page numbers)


def too_large(size: int, limit: int) -> str:
    return (f"the upload is larger than this server's limit of {limit / 1e6:g} MB ({size / 1e6:.1f} MB or more "
            "received); split it, or restart the server with a larger --max-upload-mb")


def limited(receive: Callable[[], Awaitable[dict]], limit: int) -> Callable[[], Awaitable[dict]]:
    """An ASGI receive that raises UploadTooLarge once the body passes `limit` bytes (a client that sends
    no Content-Length, or a wrong one, is stopped all the same)."""
    seen = 0

    async def receive_limited() -> dict:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise UploadTooLarge(too_large(seen, limit))
        return message

    return receive_limited


async def read_form(request: Request, limit: int) -> tuple[list[UploadFile], str | None]:
    """The uploaded files (form field `files`) and the optional `name` of the page images' document."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise UploadTooLarge(too_large(int(declared), limit))
    form = await Request(request.scope, limited(request.receive, limit)).form(max_files=MAX_FILES)
    files = [f for f in form.getlist("files") if isinstance(f, UploadFile)]
    if not files:
        raise UploadRefused(422, "no files: send PDF files or page images (PNG/JPEG) as the multipart field 'files'")
    name = form.get("name")
    return files, name if isinstance(name, str) and name.strip() else None


def safe_name(filename: str | None, default: str) -> str:
    """The last part of an uploaded file name, with only plain characters (no folders, no hidden files)."""
    name = _UNSAFE.sub("_", Path((filename or "").replace("\\", "/")).name).strip(" .")
    return name[:200] or default


async def stage(files: list[UploadFile], images_name: str | None, tmp: Path) -> list[Upload]:
    """Copy the files into `tmp` and check them; raises UploadRefused naming each file that cannot be ingested."""
    pdfs: list[tuple[str, Path]] = []
    images: list[Path] = []
    folder = tmp / "images" / safe_name(images_name, "page-images")
    problems: list[tuple[int, str]] = []
    for i, upload in enumerate(files):
        name = safe_name(upload.filename, f"upload-{i + 1}")
        suffix = Path(name).suffix.lower()
        path = folder / name if suffix in IMAGE_SUFFIXES else tmp / str(i) / name
        if path.exists():
            problems.append((422, f"{name}: uploaded twice; send each page image once"))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            while block := await upload.read(1 << 20):
                out.write(block)
        if suffix in IMAGE_SUFFIXES:
            images.append(path)
        else:
            pdfs.append((name, path))
    checked = []
    for name, path in pdfs:
        _check(checked, problems, name, path, "pdf")
    if images:
        _check(checked, problems, folder.name, folder, "images")
    if problems:
        raise UploadRefused(max(status for status, _ in problems), "; ".join(message for _, message in problems))
    return checked


def _check(checked: list[Upload], problems: list[tuple[int, str]], name: str, path: Path, kind: str) -> None:
    """What `docrefrag ingest PATH` would refuse, with its message, the server's path replaced by `name`."""
    sources, failed = discover([path])
    try:
        if failed:
            unsupported = "unsupported file type" in failed[0].message
            raise UploadRefused(415 if unsupported else 422, failed[0].message)
        (source,) = sources
        if kind == "images":
            for file in source.files:
                open_page_image(file)
        n_pages, note = inspect_source(source)
        checked.append(Upload(name, kind, path, content_hash(source)[0], n_pages, note))
    except UploadRefused as e:
        problems.append((e.status, _named(str(e), path, name)))
    except (IngestError, ValueError) as e:
        problems.append((422, _named(str(e), path, name)))


def _named(message: str, path: Path, name: str) -> str:
    for where in {str(path.resolve()), str(path)}:
        message = message.replace(where, name)
    return message


def keep(upload: Upload, folder: Path) -> Path:
    """Move the checked upload into `folder` (in the store); the path to ingest."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.move(str(upload.path), str(folder / upload.path.name))).resolve()

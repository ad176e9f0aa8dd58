"""`docrefrag serve`'s uploads: a bad file refused with the CLI's message and nothing written, page
images checked, the size limit with and without a Content-Length, an upload ingested in the background
while an ask sent meanwhile waits for it (both complete, nothing lost), and the command starting
uvicorn on loopback.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import ANSWER_PAGE, REPO, make_report, subprocess_env
from PIL import Image
from server_client import NODES, ask, served

# ---------------------------------------------------------------------- uploads


def _files(*named: tuple[str, bytes]) -> list:
    return [("files", (name, data)) for name, data in named]


def _cli_message(tmp_path: Path, monkeypatch, capsys, name: str, data: bytes) -> str:
    """What `docrefrag ingest NAME` prints for the file, run from its folder."""
    from docrefrag.cli import main

    folder = tmp_path / "cli"
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(data)
    monkeypatch.chdir(folder)
    main(["ingest", name, "--store", str(tmp_path / "cli-store")])
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("failed")]
    return line.removeprefix("failed").strip().replace(str((folder / name).resolve()), name)


def _png() -> bytes:
    image = Image.new("RGB", (400, 300), "white")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize("name, data, status", [
    ("junk.pdf", b"this is not a PDF at all", 422), ("empty.pdf", b"", 422), ("notes.txt", b"plain words", 415),
    ("report.docx", b"PK\x03\x04", 415),
])
def test_a_bad_file_is_refused_with_the_cli_message_and_nothing_is_written(tmp_path, monkeypatch, capsys, name,
                                                                          data, status):
    client, _ = served(tmp_path / "store")
    before = set(Path(tempfile.gettempdir()).glob("docrefrag-upload-*"))
    with client:
        response = client.post("/documents", files=_files((name, data)))
    assert response.status_code == status, response.text
    assert response.json()["detail"] == _cli_message(tmp_path, monkeypatch, capsys, name, data)
    assert not (tmp_path / "store").exists()
    assert set(Path(tempfile.gettempdir()).glob("docrefrag-upload-*")) == before  # the staging folder is gone


@pytest.mark.parametrize("files, status, words", [
    ([("scan.png", _png())], 422, "carry their page number"),
    ([("page_1.png", _png()), ("page_2.png", b"\x89PNG broken")], 422, "page_2.png is not a readable image"),
    ([("page_1.png", _png()), ("p1.png", _png())], 422, "two page images carry the same page number"),
    ([("page_1.png", _png()), ("page_1.png", _png())], 422, "uploaded twice"),
    ([("../../etc/passwd", b"root:x:0:0")], 415, "passwd: unsupported file type"),
    ([], 422, "no files"),
])
def test_bad_page_images_and_odd_names_are_refused(tmp_path, files, status, words):
    client, _ = served(tmp_path / "store")
    with client:
        response = client.post("/documents", files=_files(*files) if files else None, data={"name": "scan"})
    assert response.status_code == status and words in response.json()["detail"], response.text
    assert str(tmp_path) not in response.text and not (tmp_path / "store").exists()


def test_an_oversized_upload_is_refused_with_or_without_a_length(tmp_path, light_pdf):
    client, _ = served(tmp_path / "store", max_upload_mb=0.002)
    pdf = light_pdf(tmp_path / "survey.pdf", 3).read_bytes()
    assert len(pdf) > 2000
    response = client.post("/documents", files=_files(("survey.pdf", pdf)))
    assert response.status_code == 413 and "limit of 0.002 MB" in response.json()["detail"]

    boundary = "docrefrag-test-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"survey.pdf\"\r\n"
            f"Content-Type: application/pdf\r\n\r\n").encode() + pdf + f"\r\n--{boundary}--\r\n".encode()
    chunked = client.post("/documents", content=iter([body[i:i + 500] for i in range(0, len(body), 500)]),
                          headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert chunked.status_code == 413, chunked.text
    assert not (tmp_path / "store").exists()


def test_an_ask_sent_during_an_ingest_waits_for_it_and_both_complete(tmp_path):
    client, script = served(tmp_path / "store")
    pdf = make_report(tmp_path / "transit-review.pdf").read_bytes()
    seen: list[dict] = []
    with client:
        upload = client.post("/documents", files=_files(("transit-review.pdf", pdf), ("page_1.png", _png())),
                             data={"name": "scan"})
        assert upload.status_code == 202, upload.text
        jobs = upload.json()["ingests"]
        assert [(j["name"], j["kind"], j["n_pages"]) for j in jobs] == [("transit-review.pdf", "pdf", 6),
                                                                        ("scan", "images", 1)]
        assert {j["state"] for j in jobs} <= {"queued", "ingesting"}
        stop = threading.Event()

        def watch() -> None:  # the progress, while the ask below waits
            while not stop.is_set():
                seen.append(client.get("/documents").json())
                time.sleep(0.2)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            script.set("4,812", "Yes")
            stream = ask(client)
        finally:
            stop.set()
            watcher.join()
        assert stream[0][1]["waiting_for"] == ["the ingest of transit-review.pdf, scan"]
        assert [name for name, _ in stream] == ["run", *NODES, "result"]
        result = stream[-1][1]
        assert result["answer"] == "4812"
        assert (result["citations"][0]["doc_id"], result["citations"][0]["page"]) == (jobs[0]["doc_id"], ANSWER_PAGE)

        body = client.get("/documents").json()
        docs = {d["doc_id"]: d for d in body["documents"]}
        assert [(docs[j["doc_id"]]["name"], docs[j["doc_id"]]["state"]) for j in jobs] == [
            ("transit-review.pdf", "ready"), ("scan", "ready")]
        assert [(j["state"], j["status"], j["pages_done"]) for j in body["ingests"]] == [("done", "added", 6),
                                                                                        ("done", "added", 1)]
        assert "source" not in json.dumps(body)
        states = {j["state"] for snapshot in seen for j in snapshot["ingests"]}
        assert "ingesting" in states or "queued" in states, states  # the ask was sent while the ingest ran
        assert client.get(f"/documents/{jobs[0]['doc_id']}/pages/{ANSWER_PAGE}.jpg").status_code == 200
    kept = sorted(p.relative_to(tmp_path / "store" / "uploads").parts[1:] for p in
                  (tmp_path / "store" / "uploads").glob("*/*"))
    assert kept == [("scan",), ("transit-review.pdf",)]


def test_serve_starts_uvicorn_on_loopback(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "docrefrag", "serve", "--store", str(tmp_path / "store"),
                             "--port", str(port)], cwd=REPO, env=subprocess_env(), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/documents", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.3)
        assert response.json() == {"documents": [], "ingests": []}
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert "serving the store" in proc.stderr.read()

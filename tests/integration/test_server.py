"""`docrefrag serve`'s HTTP API through FastAPI's test client, over conftest's ingested report (the
answer in the table on page 4): the page and its assets, the document list, search, page images with
regions boxed, ids and page numbers validated, asks streamed node by node, runs read and resumed, the
LLM key kept out of every answer. The bearer token is in tests/unit/test_server_token.py, uploads and
background ingests in test_server_uploads.py.
"""

from __future__ import annotations

import io
import json
import re

import pytest
from conftest import ANSWER_PAGE, PAGE_SIZE, QUESTION
from PIL import Image
from server_client import KEY, NODES, ask, events, served

from docrefrag.agents.endpoint import LLMUnavailableError


@pytest.fixture(scope="module")
def server(report):
    client, script = served(report[0])
    with client:
        yield client, script, report[1]


# ---------------------------------------------------------------------- the page, documents, search


def test_the_page_and_its_assets_are_served_by_the_package(server):
    client, _, _ = server
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for element in ('id="page-image"', 'id="citation-box"', 'id="upload-form"', 'id="ask-form"', 'id="retrieved"'):
        assert element in page.text
    assert "http" not in page.text.replace("http-equiv", "")  # no CDN
    for asset in ("/static/app.js", "/static/app.css"):
        assert client.get(asset).status_code == 200
    assert "/documents" in client.get("/openapi.json").json()["paths"]
    docs = client.get("/docs")  # Swagger UI from files the server holds: it works offline
    assert docs.status_code == 200 and "cdn" not in docs.text and "https://" not in docs.text
    for asset in re.findall(r'(?:src|href)="(/[^"]+\.(?:js|css))"', docs.text):
        assert client.get(asset).status_code == 200, asset
    assert len(re.findall(r'(?:src|href)="/[^"]+\.(?:js|css)"', docs.text)) == 2


def test_documents_lists_the_report_without_server_paths(server):
    client, _, doc_id = server
    body = client.get("/documents").json()
    (doc,) = body["documents"]
    assert (doc["doc_id"], doc["name"], doc["n_pages"], doc["state"]) == (doc_id, "transit-review.pdf", 6, "ready")
    assert "source" not in doc and "writer_pid" not in doc and body["ingests"] == []


def test_search_ranks_the_table_page_with_each_score(server):
    client, _, doc_id = server
    body = client.get("/search", params={"q": "Northfield passengers 2019", "k": 3}).json()
    assert len(body["hits"]) == 3 and ANSWER_PAGE in [h["page"] for h in body["hits"]]
    hit = body["hits"][0]
    assert {"fused", "sparse", "dense", "bbox", "snippet"} <= set(hit) and hit["name"] == "transit-review.pdf"
    assert hit["image"] == f"/documents/{doc_id}/pages/{hit['page']}.jpg"
    assert client.get("/search", params={"q": "Northfield", "doc": "transit-review.pdf"}).status_code == 200


@pytest.mark.parametrize("params, status, words", [
    ({"q": ""}, 422, "at least 1"), ({"q": "   "}, 422, "query is empty"), ({"q": "x", "k": 0}, 422, "greater"),
    ({"q": "x", "fusion": "mean"}, 422, "consistency"), ({"q": "x", "doc": "nothing-here"}, 404, "no document"),
])
def test_search_refuses_bad_input(server, params, status, words):
    response = server[0].get("/search", params=params)
    assert response.status_code == status and words in response.text, response.text


# ---------------------------------------------------------------------- page images


def test_page_image_is_the_stored_render_and_boxes_are_drawn_where_given(server, report):
    client, _, doc_id = server
    plain = client.get(f"/documents/{doc_id}/pages/{ANSWER_PAGE}.jpg")
    assert plain.status_code == 200 and plain.headers["content-type"] == "image/jpeg"
    assert plain.content == (report[0] / "renders" / doc_id / f"{ANSWER_PAGE}.jpg").read_bytes()
    info = client.get(f"/documents/{doc_id}/pages/{ANSWER_PAGE}").json()
    assert (info["width"], info["height"]) == PAGE_SIZE and info["n_pages"] == 6
    render = Image.open(io.BytesIO(plain.content))
    assert (info["render"]["width"], info["render"]["height"]) == render.size

    box = (100.0, 200.0, 300.0, 260.0)  # on the page's blank band between the filler text and the table
    boxed = client.get(f"/documents/{doc_id}/pages/{ANSWER_PAGE}.jpg", params={"boxes": ",".join(map(str, box))})
    image = Image.open(io.BytesIO(boxed.content)).convert("RGB")
    sx, sy = image.width / PAGE_SIZE[0], image.height / PAGE_SIZE[1]
    red, green, blue = image.getpixel((round((box[0] + box[2]) / 2 * sx), round(box[1] * sy)))  # its top edge
    assert red > 180 and green < 90 and blue < 110, (red, green, blue)
    inside = image.getpixel((round((box[0] + box[2]) / 2 * sx), round((box[1] + box[3]) / 2 * sy)))
    assert min(inside) > 200  # only the outline is drawn


@pytest.mark.parametrize("path, status", [
    ("{doc}/pages/0.jpg", 422), ("{doc}/pages/7.jpg", 404), ("{doc}/pages/-1.jpg", 422),
    ("{doc}/pages/two.jpg", 422), ("{doc}/pages/99999999999999999999.jpg", 404),
    ("{doc}/pages/7", 404), ("0123456789abcdef/pages/1.jpg", 404), ("transit-review.pdf/pages/1.jpg", 422),
    ("..%2F..%2Fcatalog.sqlite/pages/1.jpg", 404), ("%2e%2e/pages/1.jpg", 422), ("{doc}%2F..%2F../pages/1.jpg", 404),
    ("{doc}/pages/1.jpg%2F..%2F..%2F..%2Fcatalog.sqlite", 404),
])
def test_page_routes_validate_ids_and_page_numbers(server, path, status):
    client, _, doc_id = server
    response = client.get("/documents/" + path.format(doc=doc_id))
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")  # never a file's bytes


@pytest.mark.parametrize("boxes", ["1,2,3", "5,5,1,1", "a,b,c,d", "1,2,3,nan", ";".join(["0,0,1,1"] * 51)])
def test_bad_boxes_are_refused(server, boxes):
    client, _, doc_id = server
    response = client.get(f"/documents/{doc_id}/pages/1.jpg", params={"boxes": boxes})
    assert response.status_code == 422 and "boxes" in response.json()["detail"]


# ---------------------------------------------------------------------- asking, runs, resume


def test_ask_streams_one_event_per_node_and_ends_with_the_cited_answer(server):
    client, script, doc_id = server
    script.set("4,812", "Yes")
    stream = ask(client)
    names = [name for name, _ in stream]
    assert names == ["run", *NODES, "result"]
    run_id = stream[0][1]["run_id"]
    retrieve = dict(stream)["retrieve"]
    assert retrieve["trace"][0]["node"] == "retrieve" and retrieve["trace"][0]["hits"]
    result = stream[-1][1]
    assert (result["run_id"], result["answer"], result["supported"]) == (run_id, "4812", True)
    assert [e["node"] for e in result["trace"]] == NODES
    citation = result["citations"][0]
    assert (citation["doc_id"], citation["page"], citation["name"]) == (doc_id, ANSWER_PAGE, "transit-review.pdf")
    x0, y0, x1, y1 = citation["bbox"]
    assert 0 <= x0 < x1 <= PAGE_SIZE[0] and 0 <= y0 < y1 <= PAGE_SIZE[1]
    assert client.get(citation["image"], params={"boxes": f"{x0},{y0},{x1},{y1}"}).status_code == 200

    run = client.get(f"/runs/{run_id}").json()
    assert run["finished"] and run["next"] == [] and run["question"] == QUESTION
    assert run["result"]["answer"] == "4812" and run["result"]["citations"] == result["citations"]
    assert run["config"]["answerer"] == "chat"


@pytest.mark.parametrize("body, words", [
    ({"question": ""}, "at least 1"), ({"question": "  "}, "the question is empty"),
    ({"question": "q", "config": {"llm": "openai:m@http://elsewhere/v1"}}, "unknown setting(s) llm"),
    ({"question": "q", "config": {"max_rounds": 0}}, "max_rounds must be >= 1"),
    ({"question": "q", "config": {"tau": "high"}}, "tau must be of type float"), ({}, "Field required"),
])
def test_ask_refuses_bad_input_before_streaming(server, body, words):
    response = server[0].post("/ask", json=body)
    assert response.status_code == 422 and words in response.text, response.text


def test_runs_are_validated(server):
    client = server[0]
    assert client.get("/runs/0123456789ab").status_code == 404
    assert client.get("/runs/a.b").status_code == 422
    assert client.post("/runs/0123456789ab/resume").status_code == 404


def test_a_failed_run_is_resumed_and_the_llm_key_never_leaves_the_server(server):
    client, script, _ = server
    script.set(LLMUnavailableError("refused the connection", 3, url=f"http://127.0.0.1:9/v1?key={KEY}"))
    stream = ask(client)
    assert [name for name, _ in stream] == ["run", "plan", "retrieve", "rerank", "error"]
    run_id, error = stream[0][1]["run_id"], stream[-1][1]
    assert error["run_id"] == run_id and "refused the connection" in error["message"] and run_id in error["message"]
    assert KEY not in json.dumps(stream) and "key=***" in error["message"]
    run = client.get(f"/runs/{run_id}").json()
    assert (run["finished"], run["next"], run["result"]) == (False, ["answer"], None)

    script.set("4,812", "Yes")
    resumed = events(client.post(f"/runs/{run_id}/resume"))
    assert [name for name, _ in resumed] == ["run", "answer", "validate", "result"]
    assert resumed[-1][1]["answer"] == "4812" and resumed[-1][1]["run_id"] == run_id
    assert client.get(f"/runs/{run_id}").json()["finished"]
    assert client.post(f"/runs/{run_id}/resume").status_code == 409
    for route in ("/documents", f"/runs/{run_id}", "/openapi.json"):
        assert KEY not in client.get(route).text

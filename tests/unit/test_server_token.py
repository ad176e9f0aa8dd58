"""`docrefrag serve`'s bearer token, through FastAPI's test client over an empty store: every route
refuses a missing or wrong token, the right one opens them (the page and its assets need none), and
`serve` refuses a public address without a token.
"""

from __future__ import annotations

import pytest
from server_client import TOKEN, served

ROUTES = [("GET", "/documents"), ("POST", "/documents"), ("GET", "/documents/0123456789abcdef/pages/1.jpg"),
          ("GET", "/documents/0123456789abcdef/pages/1"), ("GET", "/search?q=x"), ("POST", "/ask"),
          ("GET", "/runs/abc"), ("POST", "/runs/abc/resume")]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    client, _ = served(tmp_path_factory.mktemp("secured") / "store", token=TOKEN)
    with client:
        yield client


@pytest.mark.parametrize("method, route", ROUTES)
@pytest.mark.parametrize("header", [None, "Bearer wrong-token-123", f"Basic {TOKEN}", TOKEN])
def test_every_route_needs_the_token(secured, method, route, header):
    response = secured.request(method, route, headers={"Authorization": header} if header else {})
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert TOKEN not in response.text


def test_the_token_opens_the_routes_and_the_page_needs_none(secured):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert secured.get("/documents", headers=auth).json() == {"documents": [], "ingests": []}
    assert secured.get("/documents/0123456789abcdef/pages/1.jpg", headers=auth).status_code == 404
    assert secured.get("/runs/abc", headers=auth).status_code == 404
    assert secured.get("/").status_code == 200 and secured.get("/static/app.js").status_code == 200


@pytest.mark.parametrize("host, token, words", [
    ("0.0.0.0", None, "pass --token"), ("192.168.1.5", None, "pass --token"), ("example.org", None, "pass --token"),
    ("0.0.0.0", "short", "at least 8"),
])
def test_serve_refuses_a_public_address_without_a_token(tmp_path, capsys, monkeypatch, host, token, words):
    from docrefrag.cli import main

    monkeypatch.delenv("DOCREFRAG_TOKEN", raising=False)
    assert main(["serve", "--store", str(tmp_path / "s"), "--host", host, *(["--token", token] if token else [])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err

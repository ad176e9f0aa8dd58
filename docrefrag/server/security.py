"""What keeps the server safe by default: the bearer token checked on every API route, the rule that
only a loopback address may be bound without one, and the redaction of secrets (the token, the LLM
endpoint's and Qdrant's API keys) from every message that leaves the server.

The token is compared in constant time. The web page and its static files carry no data and are
served without it (a browser cannot attach a bearer token to a page it navigates to); the page
sends the token, once given, with each of its requests.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

SECRET_VARIABLES = ("OPENAI_API_KEY", "QDRANT_API_KEY")  # the keys docrefrag's endpoints read from the environment
_bearer = HTTPBearer(auto_error=False, description="the --token given to `docrefrag serve`")


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to expose the store on a non-loopback address without a token."""
    if token is None and not is_loopback(host):
        raise ValueError(f"--host {host} makes the store reachable from other machines; pass --token TOKEN "
                         "(or set $DOCREFRAG_TOKEN) so that every request must carry it, or bind 127.0.0.1")
    if token is not None and len(token) < 8:
        raise ValueError(f"the token is {len(token)} characters long; use at least 8 (e.g. `openssl rand -hex 16`)")


def bearer_check(token: str | None) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency: the request must carry `Authorization: Bearer TOKEN` (nothing when `token` is None)."""

    async def check(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        if token is None:
            return
        if credentials is None:
            raise HTTPException(401, "this server needs a bearer token: send the header "
                                     "'Authorization: Bearer TOKEN' with the --token given to docrefrag serve",
                                headers={"WWW-Authenticate": "Bearer"})
        if not secrets.compare_digest(credentials.credentials.encode(), token.encode()):
            raise HTTPException(401, "wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    return check


class Redactor:
    """Replaces each secret in a text by '***' (secrets shorter than 4 characters are not looked for)."""

    def __init__(self, extra: Iterable[str | None] = ()) -> None:
        found = [os.environ.get(name) for name in SECRET_VARIABLES] + list(extra)
        self.secrets = sorted({s for s in found if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

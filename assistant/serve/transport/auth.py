"""Who may connect: loopback by default, a bearer token for anything else.

- `is_loopback` decides whether a bind address only accepts local connections.
- `load_token` reads the token file (one line; refuses an empty file and warns when the
  file is readable by other users).
- `Authenticator.check` runs on the HTTP upgrade request, before the WebSocket is
  accepted, so a wrong or missing token never gets to send a byte of audio. The token
  is accepted as ``Authorization: Bearer <token>`` (what the OpenAI SDKs send) or as the
  ``openai-insecure-api-key.<token>`` WebSocket subprotocol (what browsers can send).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from assistant.app.errors import UserError

__all__ = ["AuthResult", "Authenticator", "is_loopback", "load_token", "SUBPROTOCOL_PREFIX"]

log = logging.getLogger("assistant.serve")

SUBPROTOCOL_PREFIX = "openai-insecure-api-key."


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def load_token(path: str | Path) -> str:
    """Read a bearer token from ``path`` (surrounding whitespace is ignored)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"{p}: token file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: cannot read token file ({exc})") from None
    token = text.strip()
    if not token:
        raise UserError(f"{p}: token file is empty")
    if any(ch.isspace() for ch in token):
        raise UserError(f"{p}: token must be a single line without spaces")
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        log.warning("token file %s is readable by other users; chmod 600 it", p)
    return token


@dataclass(frozen=True)
class AuthResult:
    ok: bool
    reason: str = ""
    """Why the request was refused (for the 401 body and the log), empty when ok."""
    subprotocol: str | None = None
    """The subprotocol that carried the token, to echo back in the handshake."""


class Authenticator:
    """Checks the bearer token of an upgrade request; no token configured = open."""

    def __init__(self, token: str | None) -> None:
        self._token = token

    @property
    def required(self) -> bool:
        return self._token is not None

    def check(self, authorization: str | None, subprotocols: list[str]) -> AuthResult:
        if self._token is None:
            return AuthResult(True)
        offered = None
        if authorization:
            scheme, _, value = authorization.strip().partition(" ")
            if scheme.lower() == "bearer":
                offered = value.strip()
        carrier = None
        if offered is None:
            for proto in subprotocols:
                if proto.startswith(SUBPROTOCOL_PREFIX):
                    offered, carrier = proto[len(SUBPROTOCOL_PREFIX):], proto
                    break
        if offered is None:
            return AuthResult(False, "missing bearer token")
        if not hmac.compare_digest(offered.encode(), self._token.encode()):
            return AuthResult(False, "invalid bearer token")
        return AuthResult(True, subprotocol=carrier)

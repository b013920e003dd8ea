"""The browser client's files: a small web page served at ``/`` by the daemon itself.

The page (``assistant/serve/web/``: plain HTML, CSS and JavaScript, no build step, nothing
fetched from elsewhere) ships as package data and is read with :mod:`importlib.resources`
on first request. `WebAssets.get` maps a request path to the file's bytes and content
type; `WebAssets.headers` are the response headers every file gets: the page may load
scripts, styles and worklets from the daemon only, and connect back to it only.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

__all__ = ["WebAsset", "WebAssets", "WEB_FILES"]

WEB_FILES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/audio.js": ("audio.js", "text/javascript; charset=utf-8"),
    "/capture-worklet.js": ("capture-worklet.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
"""Request path -> (file under ``assistant/serve/web/``, content type)."""

_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@dataclass(frozen=True)
class WebAsset:
    body: bytes
    content_type: str


class WebAssets:
    """The page's files, read from the package once each."""

    def __init__(self, package: str = "assistant.serve", folder: str = "web") -> None:
        self._root = resources.files(package).joinpath(folder)
        self._cache: dict[str, WebAsset] = {}

    def get(self, path: str) -> WebAsset | None:
        """The file served at ``path`` (no query string), or None."""
        entry = WEB_FILES.get(path)
        if entry is None:
            return None
        name, content_type = entry
        asset = self._cache.get(name)
        if asset is None:
            asset = WebAsset(self._root.joinpath(name).read_bytes(), content_type)
            self._cache[name] = asset
        return asset

    @staticmethod
    def headers() -> dict[str, str]:
        return {
            "Content-Security-Policy": _CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-cache",
        }

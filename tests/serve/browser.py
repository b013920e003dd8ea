"""A real headless Chromium for the web page's tests, its microphone a WAV file.

The browser comes from the system (Debian's ``chromium`` package, installed by
``make sysdeps``; or ``ASSISTANT_CHROMIUM=/path/to/chrome``) and is driven by Python
``playwright`` through ``executable_path`` -- playwright's own browser download is never
used. Chromium's fake media flags make a WAV file the microphone, played once from the
moment the page opens it (``%noloop``; silence after its end).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["find_chromium", "launch_args", "write_wav", "browser_page"]

CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def find_chromium() -> str | None:
    """The Chromium to test with, or None."""
    env = os.environ.get("ASSISTANT_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for path in (*CANDIDATES, shutil.which("chromium"), shutil.which("chromium-browser")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def launch_args(microphone: Path) -> list[str]:
    """Offline, quiet, no GPU, and ``microphone`` (absolute) as the only audio input."""
    return [
        "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone.resolve()}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]


def write_wav(path: Path, pcm: npt.NDArray[np.int16], rate: int = 24000) -> Path:
    """Mono 16-bit PCM, as Chromium's fake capture reads it."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(pcm, "<i2").tobytes())
    return path


@contextlib.asynccontextmanager
async def browser_page(executable: str, microphone: Path, tmp: Path) -> AsyncIterator[Any]:
    """A new page in a fresh headless Chromium (its own profile under ``tmp``); console
    errors are collected on ``page.console_errors``."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp / "profile"), executable_path=executable, headless=True,
            args=launch_args(microphone), ignore_default_args=["--mute-audio"],
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.console_errors = errors
            yield page
        finally:
            await context.close()

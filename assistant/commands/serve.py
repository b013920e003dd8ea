"""``assistant serve``: the headless daemon (a subset of the OpenAI Realtime API)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assistant.app.config import AppConfig

__all__ = ["register", "run"]

DESCRIPTION = """\
Run the assistant as a WebSocket daemon that speaks a subset of the OpenAI Realtime API,
so existing Realtime clients work unchanged: point the OpenAI SDK's websocket_base_url at
ws://HOST:PORT/v1. Many sessions share one engine (decode steps are batched, the system
prompt's KV pages are shared). Loopback only by default; a non-loopback --host requires
--token-file. GET /healthz and /metrics (Prometheus) are served on the same port, and
GET / is a web page to talk to the assistant from a browser.
SIGTERM finishes or cancels responses in progress and closes sockets with a reason.
"""


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag, key in (
        ("host", "server.host"),
        ("port", "server.port"),
        ("token_file", "server.token_file"),
        ("max_sessions", "server.max_sessions"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            out[key] = value
    return out


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "serve",
        help="run the Realtime-compatible WebSocket daemon",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", help="address to bind (default server.host: 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (default server.port; 0 = any)")
    parser.add_argument(
        "--token-file", metavar="F",
        help="file holding the bearer token clients must send (required off loopback)",
    )
    parser.add_argument(
        "--max-sessions", type=int, metavar="N", help="concurrent sessions (default 8)"
    )
    parser.add_argument(
        "--local-audio", action="store_true",
        help="also run the local microphone/speaker loop inside the daemon (headless talk)",
    )
    parser.add_argument(
        "--shutdown-grace", type=float, default=5.0, metavar="S",
        help="on SIGTERM, seconds responses in progress may take to finish (default 5)",
    )
    parser.set_defaults(func=run, config_overrides=_overrides)


def _token(cfg: AppConfig) -> str | None:
    from assistant.serve.transport.auth import load_token

    path = cfg.server.token_file
    if path is None:
        return None
    p = Path(path).expanduser()
    if not p.is_absolute() and cfg.config_dir is not None and not p.exists():
        p = cfg.config_dir / p
    return load_token(p)


def run(args: argparse.Namespace, cfg: AppConfig) -> int:
    import asyncio

    from assistant.app.errors import UserError
    from assistant.serve.transport.auth import is_loopback
    from assistant.serve.transport.limits import ServerLimits
    from assistant.serve.transport.server import ServerOptions

    token = _token(cfg)
    if not is_loopback(cfg.server.host) and token is None:
        # Checked before any model loads, so the mistake costs nothing.
        raise UserError(
            f"--host {cfg.server.host} is not a loopback address: a bearer token is "
            "required (--token-file FILE or server.token_file)"
        )
    if args.shutdown_grace <= 0:
        raise UserError("--shutdown-grace must be > 0 seconds")
    if args.local_audio:
        from audio.devices import resolve_device

        # Fail on a missing device before spending seconds on the models.
        resolve_device(cfg.audio.input_device, "input")
        resolve_device(cfg.audio.output_device, "output")
    options = ServerOptions(
        host=cfg.server.host,
        port=cfg.server.port,
        token=token,
        limits=ServerLimits(
            max_sessions=cfg.server.max_sessions,
            max_message_bytes=cfg.server.max_message_bytes,
            session_queue=cfg.server.session_queue,
            shutdown_grace_s=args.shutdown_grace,
        ),
    )
    try:
        return asyncio.run(_serve(cfg, options, local_audio=args.local_audio))
    except OSError as exc:
        raise UserError(
            f"cannot listen on {cfg.server.host}:{cfg.server.port}: {exc.strerror or exc}"
        ) from None


async def _serve(cfg: AppConfig, options: Any, *, local_audio: bool) -> int:
    import asyncio
    import contextlib
    import logging
    import signal

    from assistant.serve.runtime import build_runtime
    from assistant.serve.transport.server import RealtimeServer

    log = logging.getLogger("assistant.serve")
    runtime = await asyncio.to_thread(build_runtime, cfg)
    try:
        server = RealtimeServer(
            options,
            backend_factory=runtime.backend_factory,
            defaults=runtime.defaults,
            served=runtime.served,
            engine_gauges=runtime.engine_gauges,
        )
        await server.start()
        print(f"listening on {server.url}/realtime  (healthz, metrics on the same port)",
              flush=True)
        print(f"talk from a browser: {server.page_url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        local: asyncio.Task[None] | None = None
        if local_audio:
            local = asyncio.create_task(runtime.run_local_audio(stop), name="local-audio")
        waiter = asyncio.create_task(stop.wait())
        waits: set[asyncio.Task[Any]] = {waiter} if local is None else {waiter, local}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting down")
        await server.shutdown("server shutting down")
        if local is not None:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(local, options.limits.shutdown_grace_s)
            if local.done() and not local.cancelled() and local.exception() is not None:
                raise local.exception()  # type: ignore[misc]
        waiter.cancel()
    finally:
        await asyncio.to_thread(runtime.close)
    return 0

"""A real vLLM server for the session (fp32, 32-token prefix-cache blocks, eager).

The server runs from ``.venv-vllm`` (``make vllm`` builds it); without it every test
that needs the server is skipped, saying so. It is started once, on a free port, and
stopped at the end of the session; its log is kept beside the test's temporary files.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from assistant.llm.vllm.backend import VLLMBackend
from assistant.llm.vllm.connect import VLLMOptions, connect, load_tokenizer
from assistant.llm.vllm.server import VLLM_VENV, ServerOptions, VLLMServer

NO_VLLM = ("no .venv-vllm: `make vllm` installs vLLM's CPU build there; the vLLM backend "
           "is tested against a real server only")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_options(model_dir: Path) -> ServerOptions:
    cores = os.cpu_count() or 1
    return ServerOptions(model_dir, free_port(), cpu_threads=f"0-{min(cores, 2) - 1}")


_EARLY = pytest.StashKey[VLLMServer]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the server as soon as the run is known to need it: it boots (25-70 s on two
    cores) while the tests before ours run, and idles until they are done."""
    if os.environ.get("ASSISTANT_TEST_VLLM_PORT") or not _has_vllm():
        return
    if not any("vllm_server" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    from assistant.app.config import load_config
    from assistant.app.models import resolve_llm

    model = resolve_llm(load_config(Path(__file__).resolve().parents[2] / "config.yaml",
                                    env={}))
    log = Path(tempfile.mkdtemp(prefix="assistant-vllm-test-")) / "server.log"
    session.config.stash[_EARLY] = VLLMServer(server_options(model), log_path=log).start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    server = session.config.stash.get(_EARLY, None)
    if server is not None:
        server.stop()


def _has_vllm() -> bool:
    return (VLLM_VENV / "bin" / "python").is_file()


@pytest.fixture(scope="session")
def vllm_server(request: pytest.FixtureRequest, llm_dir: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """The session's server (started at collection, see above); ``ASSISTANT_TEST_VLLM_PORT``
    names one already running on this machine instead, to iterate on the tests."""
    port = os.environ.get("ASSISTANT_TEST_VLLM_PORT")
    if port:
        yield VLLMServer(ServerOptions(llm_dir, int(port)), log_path=Path(os.devnull))
        return
    if not _has_vllm():
        pytest.skip(NO_VLLM)
    server = request.config.stash.get(_EARLY, None)
    if server is None:
        log = tmp_path_factory.mktemp("vllm") / "server.log"
        server = VLLMServer(server_options(llm_dir), log_path=log).start()
    try:
        server.wait_ready(timeout_s=600)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tokenizer(llm_dir: Path) -> object:
    return load_tokenizer(llm_dir)


@pytest.fixture
def vllm_backend(vllm_server: VLLMServer, llm_dir: Path,
                 tokenizer: object) -> Iterator[VLLMBackend]:
    backend = connect(VLLMOptions((vllm_server.url,)), llm_dir, tokenizer=tokenizer)
    try:
        yield backend
    finally:
        backend.close()

"""Start and stop a local vLLM server (tests, benches, a one-machine deployment).

vLLM runs in its own virtual environment (``make vllm`` builds ``.venv-vllm``: its
pins differ from ours). The command is the one docs/vllm.md documents: fp32, prefix
caching with ``block_size``-token blocks, eager mode (ready in ~25 s on a CPU instead
of ~90 s compiling), a fixed KV budget, ``cached_tokens`` in the usage, and our
windowed repetition penalty (:mod:`assistant.llm.vllm.penalty`) loaded from this
project's source tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from assistant.llm.vllm.client import Endpoint, Unreachable

__all__ = ["ServerOptions", "VLLMServer", "server_command", "PROJECT_ROOT", "VLLM_VENV"]

PROJECT_ROOT = Path(__file__).resolve().parents[3]
VLLM_VENV = PROJECT_ROOT / ".venv-vllm"
PENALTY_PROCESSOR = "assistant.llm.vllm.penalty:WindowedRepetitionPenalty"


@dataclass(frozen=True)
class ServerOptions:
    model_dir: Path
    """A transformers directory (our converted safetensors directory)."""
    port: int
    host: str = "127.0.0.1"
    python: Path = VLLM_VENV / "bin" / "python"
    dtype: str = "float32"
    block_size: int = 32
    """Prefix-cache block, tokens (the CPU attention backend takes multiples of 32)."""
    max_model_len: int = 2048
    kv_cache_bytes: int = 256 << 20
    cpu_threads: str = ""
    """``VLLM_CPU_OMP_THREADS_BIND`` (e.g. ``0-1``); empty: every core."""
    windowed_penalty: bool = True
    extra_args: tuple[str, ...] = field(default=())

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def server_command(opts: ServerOptions) -> list[str]:
    cmd = [str(opts.python), "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(opts.model_dir), "--host", opts.host, "--port", str(opts.port),
           "--dtype", opts.dtype, "--max-model-len", str(opts.max_model_len),
           "--enable-prefix-caching", "--block-size", str(opts.block_size),
           "--enforce-eager", "--kv-cache-memory-bytes", str(opts.kv_cache_bytes),
           "--enable-prompt-tokens-details",
           # Compact JSON under a schema (tool calls), as the local engine decodes it;
           # vLLM reads the whitespace rule from the server's config only.
           "--structured-outputs-config",
           '{"backend": "xgrammar", "disable_any_whitespace": true}']
    if opts.windowed_penalty:
        cmd += ["--logits-processors", PENALTY_PROCESSOR]
    return cmd + list(opts.extra_args)


class VLLMServer:
    """One server process (and its engine-core child, in the same process group)."""

    def __init__(self, opts: ServerOptions, *, log_path: Path) -> None:
        self.opts = opts
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.opts.url

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> VLLMServer:
        if not self.opts.python.is_file():
            raise FileNotFoundError(f"{self.opts.python}: no vLLM environment (make vllm)")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
        if self.opts.cpu_threads:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.opts.cpu_threads
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        env["VLLM_NO_USAGE_STATS"] = "1"
        env["DO_NOT_TRACK"] = "1"
        env["HF_HUB_OFFLINE"] = "1"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(server_command(self.opts), env=env, stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        return self

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Until ``/health`` answers; raises with the log's tail if the process dies."""
        endpoint = Endpoint(self.url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"vLLM server exited while starting:\n{self.log_tail()}")
            try:
                endpoint.get_text("/health", timeout_s=2.0)
                return
            except Unreachable:
                time.sleep(0.5)
        raise TimeoutError(f"vLLM server not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """Stop at once (SIGKILL to the server's process group): a crashed replica."""
        self._signal(signal.SIGKILL)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``. Idempotent."""
        if self._proc is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self._proc.wait(timeout_s)

    def _signal(self, sig: int) -> None:
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


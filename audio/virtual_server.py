"""A private PulseAudio server with virtual devices: the live audio path without hardware.

PortAudio reaches it through ALSA's pulse plugin (``libasound2-plugins``) whenever
``PULSE_SERVER`` points at it, so ``assistant talk`` runs unchanged against it. Every
device sits on one stereo null sink, ``bus``, so the microphone and the speaker are
recorded on one clock, sample-aligned:

- ``micfeed`` (mono sink) -> the bus's left channel: play test recordings here;
- ``spk`` (mono sink, the default output) -> the bus's right channel;
- ``mic`` (mono source, the default input) <- the bus monitor's left channel.

The assistant never hears its own output unless :meth:`VirtualAudioServer.leak_speaker`
adds a speaker-to-microphone path (an echo). Tests and ``bench/bench_live.py`` use it;
nothing else starts it. Needs Debian's ``pulseaudio``, ``pulseaudio-utils`` and
``libasound2-plugins`` (:func:`missing_packages` says which are absent).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from audio.errors import DeviceError

__all__ = ["BUS_RATE", "BusRecorder", "VirtualAudioServer", "missing_packages"]

BUS_RATE = 48000
"""Hz, the bus's rate (both channels)."""

_ALSA_PULSE_PLUGIN = "libasound_module_pcm_pulse.so"


def missing_packages() -> list[str]:
    """The Debian packages this needs that are not installed (empty: all there)."""
    missing = []
    if shutil.which("pulseaudio") is None:
        missing.append("pulseaudio")
    if any(shutil.which(tool) is None for tool in ("pactl", "paplay", "parec")):
        missing.append("pulseaudio-utils")
    plugin_dirs = ("/usr/lib/*/alsa-lib", "/usr/lib/alsa-lib", "/usr/lib64/alsa-lib")
    if not any(glob.glob(f"{d}/{_ALSA_PULSE_PLUGIN}") for d in plugin_dirs):
        missing.append("libasound2-plugins")
    return missing


def _config(socket: Path) -> str:
    # norewinds=1: without it a recorder that connects late can lose up to 2 s of the bus.
    return "\n".join((
        f"load-module module-native-protocol-unix auth-anonymous=1 socket={socket}",
        f"load-module module-null-sink sink_name=bus channels=2 rate={BUS_RATE} "
        "channel_map=front-left,front-right norewinds=1",
        "load-module module-remap-sink sink_name=micfeed master=bus channels=1 "
        "master_channel_map=front-left channel_map=mono remix=no",
        "load-module module-remap-sink sink_name=spk master=bus channels=1 "
        "master_channel_map=front-right channel_map=mono remix=no",
        "load-module module-remap-source source_name=mic master=bus.monitor channels=1 "
        "master_channel_map=front-left channel_map=mono remix=no",
        "set-default-sink spk",
        "set-default-source mic",
        "",
    ))


class BusRecorder:
    """Records the bus (``parec``, raw 16-bit stereo) into memory on a reader thread.

    Column 0 of :meth:`samples` is the microphone, column 1 the speaker, at
    :data:`BUS_RATE`; row 0 is the moment the recorder connected."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._data = bytearray()
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            ["parec", "-d", "bus.monitor", "--raw", "--format=s16le", f"--rate={BUS_RATE}",
             "--channels=2", "--latency-msec=20"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(env))
        self._reader = threading.Thread(target=self._read, name="bus-recorder", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while block := os.read(fd, 1 << 14):
            with self._lock:
                self._data += block

    def samples(self) -> npt.NDArray[np.float32]:
        """Everything recorded so far: float32, shape ``(frames, 2)``."""
        with self._lock:
            usable = len(self._data) // 4 * 4
            raw = np.frombuffer(bytes(self._data[:usable]), dtype="<i2")
        return (raw.reshape(-1, 2).astype(np.float32) / np.float32(32768.0))

    @property
    def frames(self) -> int:
        with self._lock:
            return len(self._data) // 4

    def stop(self) -> npt.NDArray[np.float32]:
        """Stop recording (idempotent); returns everything recorded."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._reader.join(5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        return self.samples()


class VirtualAudioServer:
    """A private ``pulseaudio`` in ``directory`` (see the module docstring).

    Use as a context manager, or :meth:`start` / :meth:`close`. Clients reach it with
    :attr:`env` (the current environment plus ``PULSE_SERVER``)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.socket = self.directory / "native"
        self.log_path = self.directory / "pa.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """The environment for a client process (PortAudio, paplay, parec, pactl)."""
        env = dict(os.environ)
        env["PULSE_SERVER"] = f"unix:{self.socket}"
        return env

    def start(self, timeout_s: float = 15.0) -> None:
        missing = missing_packages()
        if missing:
            raise DeviceError("a virtual audio server needs the packages " + " ".join(missing))
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "pa.conf"
        conf.write_text(_config(self.socket))
        env = dict(os.environ, HOME=str(self.directory), XDG_RUNTIME_DIR=str(self.directory))
        env.pop("PULSE_SERVER", None)
        self._proc = subprocess.Popen(
            ["pulseaudio", "-n", "-F", str(conf), "--daemonize=no", "--exit-idle-time=-1",
             "--disallow-exit", "--use-pid-file=no", f"--log-target=file:{self.log_path}"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self.socket.exists() and self._pactl("info", check=False).returncode == 0:
                return
            time.sleep(0.1)
        log = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        self.close()
        raise DeviceError(f"the virtual audio server did not start; its log ends:\n{log}")

    def close(self) -> None:
        """Stop the server (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> VirtualAudioServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pactl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["pactl", *args], env=self.env, capture_output=True, text=True,
                              timeout=10, check=check)

    def play(self, wav: str | os.PathLike[str], sink: str = "micfeed") -> subprocess.Popen[bytes]:
        """Start playing a WAV file into ``sink`` in real time (the microphone by default)."""
        return subprocess.Popen(
            ["paplay", "-d", sink, "--latency-msec=20", os.fspath(wav)], env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def feed(self, wav: str | os.PathLike[str], timeout_s: float | None = None) -> None:
        """Play a WAV file into the microphone and wait until it has been played."""
        proc = self.play(wav)
        _, err = proc.communicate(timeout=timeout_s)
        if proc.returncode != 0:
            raise DeviceError(f"paplay {wav} failed: {err.decode(errors='replace').strip()}")

    def record(self) -> BusRecorder:
        """Start recording the bus (stop the recorder to end it)."""
        return BusRecorder(self.env)

    @contextlib.contextmanager
    def leak_speaker(self, gain: float = 1.0, latency_ms: int = 30) -> Iterator[None]:
        """An echo path: the speaker's output mixed into the microphone at ``gain``
        (linear) after about ``latency_ms``, while the context is open."""
        module = self._pactl("load-module", "module-loopback", "source=spk.monitor",
                             "sink=micfeed", f"latency_msec={latency_ms}",
                             "source_dont_move=true", "sink_dont_move=true").stdout.strip()
        try:
            if gain != 1.0:
                self._set_loopback_volume(module, gain)
            yield
        finally:
            self._pactl("unload-module", module, check=False)

    def _set_loopback_volume(self, module: str, gain: float) -> None:
        # Short listing: index, sink, client, driver, format (the owner module is not shown;
        # there is one loopback at a time).
        for line in self._pactl("list", "short", "sink-inputs").stdout.splitlines():
            fields = line.split()
            if len(fields) > 3 and fields[3] == "module-loopback.c":
                self._pactl("set-sink-input-volume", fields[0], f"{gain:.4f}")
                return
        raise DeviceError(f"loopback module {module} has no sink input")

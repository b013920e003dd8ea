"""Sound devices through ``sounddevice`` (PortAudio), imported lazily.

Importing ``sounddevice`` fails with a bare ``OSError`` when the PortAudio shared
library is missing (Debian: ``libportaudio2``); it also probes the host's audio
system. So nothing here imports it at module level, and every failure becomes a
:class:`DeviceError` with one line saying what to do.

Streams are opened through :func:`open_input_stream` / :func:`open_output_stream`;
sources and sinks take a ``stream_factory`` with the same signature so tests can drive
their callbacks without any sound hardware.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from audio.errors import DeviceError

__all__ = [
    "DeviceInfo",
    "StreamFactory",
    "load_sounddevice",
    "list_devices",
    "resolve_device",
    "open_input_stream",
    "open_output_stream",
]

DeviceSpec = int | str | None
StreamFactory = Callable[..., Any]
"""``factory(device=, samplerate=, channels=, blocksize=, callback=) -> stream``.

The stream has ``start()``, ``stop()``, ``close()``, ``samplerate``, ``latency`` and
``time`` (PortAudio stream time, seconds)."""

_INSTALL_HINT = (
    "audio devices need the PortAudio library: install it (Debian/Ubuntu: "
    "'apt-get install libportaudio2') and the 'sounddevice' package"
)


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float
    """Hz."""


def load_sounddevice() -> ModuleType:
    """Import ``sounddevice`` or raise a :class:`DeviceError` saying how to get it.

    ALSA's own messages are routed to the log first (PortAudio probes ALSA on import)."""
    from audio.alsa_messages import route_alsa_messages

    route_alsa_messages()
    try:
        import sounddevice
    except ImportError as exc:
        raise DeviceError(f"{_INSTALL_HINT} (import failed: {exc})") from None
    except OSError as exc:  # "PortAudio library not found"
        raise DeviceError(f"{_INSTALL_HINT} ({exc})") from None
    return sounddevice


def list_devices() -> list[DeviceInfo]:
    """Every PortAudio device the host reports."""
    sd = load_sounddevice()
    try:
        raw = sd.query_devices()
    except Exception as exc:  # PortAudioError is not importable without PortAudio
        raise DeviceError(f"cannot list audio devices: {exc}") from None
    return [
        DeviceInfo(
            index=i,
            name=str(d["name"]),
            max_input_channels=int(d["max_input_channels"]),
            max_output_channels=int(d["max_output_channels"]),
            default_samplerate=float(d["default_samplerate"]),
        )
        for i, d in enumerate(raw)
    ]


def resolve_device(
    spec: DeviceSpec,
    kind: Literal["input", "output"],
    devices: list[DeviceInfo] | None = None,
    default_index: int | None = None,
) -> DeviceInfo:
    """Find the device named by ``spec`` (index, case-insensitive name part, or the default).

    ``devices`` and ``default_index`` may be passed (tests); by default the host's
    device list and default device are queried.
    """
    if devices is None:
        devices = list_devices()
        if spec is None and default_index is None:
            default_index = _default_index(kind)

    def usable(d: DeviceInfo) -> bool:
        return (d.max_input_channels if kind == "input" else d.max_output_channels) > 0

    candidates = [d for d in devices if usable(d)]
    if not candidates:
        raise DeviceError(f"no audio {kind} device found (is a sound card or server available?)")
    if spec is None:
        for d in candidates:
            if d.index == default_index:
                return d
        return candidates[0]
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        index = int(spec)
        for d in candidates:
            if d.index == index:
                return d
        raise DeviceError(f"no audio {kind} device with index {index}; {_names(candidates)}")
    matches = [d for d in candidates if spec.lower() in d.name.lower()]
    exact = [d for d in matches if d.name.lower() == spec.lower()]
    if len(exact) == 1:
        return exact[0]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise DeviceError(f"no audio {kind} device named {spec!r}; {_names(candidates)}")
    raise DeviceError(f"audio {kind} device name {spec!r} is ambiguous; {_names(matches)}")


def open_input_stream(
    *,
    device: int | None,
    samplerate: float,
    channels: int,
    blocksize: int,
    callback: Callable[..., None],
) -> Any:
    """An unstarted ``sounddevice.InputStream`` (float32), errors as :class:`DeviceError`."""
    return _open_stream("input", device, samplerate, channels, blocksize, callback)


def open_output_stream(
    *,
    device: int | None,
    samplerate: float,
    channels: int,
    blocksize: int,
    callback: Callable[..., None],
) -> Any:
    """An unstarted ``sounddevice.OutputStream`` (float32), errors as :class:`DeviceError`."""
    return _open_stream("output", device, samplerate, channels, blocksize, callback)


def _open_stream(
    kind: str,
    device: int | None,
    samplerate: float,
    channels: int,
    blocksize: int,
    callback: Callable[..., None],
) -> Any:
    sd = load_sounddevice()
    stream_type = sd.InputStream if kind == "input" else sd.OutputStream
    try:
        return stream_type(
            device=device, samplerate=samplerate, channels=channels, blocksize=blocksize,
            dtype="float32", latency="low", callback=callback,
        )
    except Exception as exc:
        raise DeviceError(
            f"cannot open audio {kind} device {device!r} at {samplerate} Hz: {exc}"
        ) from None


def _default_index(kind: Literal["input", "output"]) -> int:
    sd = load_sounddevice()
    default = sd.default.device
    try:
        value = default[0 if kind == "input" else 1]
    except (TypeError, IndexError):
        value = default
    return int(value) if value is not None else -1


def _names(devices: list[DeviceInfo]) -> str:
    return "available: " + ", ".join(f"[{d.index}] {d.name}" for d in devices)

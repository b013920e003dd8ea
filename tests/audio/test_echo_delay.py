"""EchoDelayEstimator on its own: a known far end, a mic that hears it some time later."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from audio.echo_delay import EchoDelay, EchoDelayEstimator

RATE = 16000
HOP = 160  # the mic arrives in 10 ms frames


class ArrayReference:
    """The far end as one array on the mic's timeline (zeros outside it)."""

    sample_rate = RATE

    def __init__(self, pcm: npt.NDArray[np.float32]) -> None:
        self.pcm = pcm

    def get(self, start: int, n: int) -> npt.NDArray[np.float32]:
        out = np.zeros(n, np.float32)
        lo, hi = max(start, 0), min(start + n, self.pcm.size)
        if hi > lo:
            out[lo - start : hi - start] = self.pcm[lo:hi]
        return out


def _far_end(seconds: float, seed: int = 3) -> npt.NDArray[np.float32]:
    """Speech-like: noise shaped by a slow envelope."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    envelope = 0.5 + 0.5 * np.sin(np.arange(n) * 2 * np.pi * 3.0 / RATE) ** 2
    return (rng.standard_normal(n) * envelope * 0.1).astype(np.float32)


def _echo(far: npt.NDArray[np.float32], delay_ms: float) -> npt.NDArray[np.float32]:
    """The far end ``delay_ms`` later (negative: earlier), by a phase shift: a delay
    between two samples spreads the correlation's peak over both."""
    n = 1 << int(np.ceil(np.log2(2 * far.size)))
    freqs = np.fft.rfftfreq(n, 1.0 / RATE)
    shifted = np.fft.irfft(np.fft.rfft(far, n) * np.exp(-2j * np.pi * freqs * delay_ms / 1000), n)
    return shifted[: far.size].astype(np.float32)


def _run(estimator: EchoDelayEstimator, mic: npt.NDArray[np.float32]) -> list[EchoDelay]:
    found = []
    for t in range(0, mic.size - HOP + 1, HOP):
        got = estimator.push(mic[t : t + HOP], t)
        if got is not None:
            found.append(got)
    return found


@pytest.mark.parametrize("delay_ms", [-200, 0, 30, 600, 790])
def test_an_echo_inside_the_range_is_found_where_it_is(delay_ms: int) -> None:
    far = _far_end(4.0)
    found = _run(EchoDelayEstimator(ArrayReference(far)), _echo(far, delay_ms))
    assert found and all(abs(f.lag_ms - delay_ms) <= 1.0 for f in found), found


@pytest.mark.parametrize("beyond_samples", [0.25, 0.5])
def test_an_echo_just_beyond_the_range_is_not_placed_on_its_edge(beyond_samples: float) -> None:
    # The peak of an echo a fraction of a sample past max_lag_ms spills onto the range's
    # last lag; that value says nothing of where the echo is.
    far = _far_end(4.0)
    mic = _echo(far, 800 + beyond_samples * 1000 / RATE)
    estimator = EchoDelayEstimator(ArrayReference(far))
    assert _run(estimator, mic) == []
    assert estimator.measured > 10, "else this proves nothing"
    # Without the edge rule the same windows report the edge itself.
    loose = EchoDelayEstimator(ArrayReference(far), edge_ms=0.0)
    assert any(abs(f.lag_ms - 800) < 0.1 for f in _run(loose, mic)), "else this proves nothing"


def test_weak_windows_count_only_when_two_in_a_row_agree() -> None:
    # An echo under louder room noise: each window's peak is weaker than sure_strength.
    far = _far_end(4.0)
    noise = np.random.default_rng(5).standard_normal(far.size).astype(np.float32)
    mic = _echo(far, 30) * 0.8 + noise * 0.1
    estimator = EchoDelayEstimator(ArrayReference(far))
    found = _run(estimator, mic)
    assert found and all(abs(f.lag_ms - 30) <= 1.0 and f.strength < estimator.sure_strength
                         for f in found), found
    # Where no two windows may agree, the same weak windows report nothing.
    single = EchoDelayEstimator(ArrayReference(far), min_strength=estimator.sure_strength)
    assert _run(single, mic) == []
    assert single.measured > 10, "else this proves nothing"


def test_nothing_is_measured_while_the_far_end_is_silent() -> None:
    far = np.zeros(RATE * 2, np.float32)
    mic = _far_end(2.0)  # the user talks; nothing plays
    estimator = EchoDelayEstimator(ArrayReference(far))
    assert _run(estimator, mic) == [] and estimator.measured == 0

"""Kafka's windowed ``Rate`` (``SampledStat`` + ``WindowedSum``), the measurement every
client quota is held to.

A rate keeps up to ``samples + 1`` samples (one extra for the sample overlapping the
window's start), each ``window_ms`` long; a sample with no event for ``samples *
window_ms`` is reset when measured. The rate is the sum of the samples divided by the
elapsed time since the oldest sample started, counted as at least ``samples - 1`` whole
windows (so a client's first burst is not measured over a few milliseconds). With
Kafka's defaults (``quota.window.num`` = 11, ``quota.window.size.seconds`` = 1) a rate
covers 10 to 11 seconds.

:func:`throttle_ms` is Kafka's ``QuotaUtils.throttleTime``: for an observed rate O over
a quota T measured over a window W, the delay X that brings O back to T assuming nothing
more is recorded: O * W / (W + X) = T, so X = (O - T) / T * W.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0
    events: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0
        self.events = 0


class Rate:
    """A rate per second of recorded values (bytes, or percent of a thread's time)."""

    __slots__ = ("samples", "window_ms", "_samples", "_current", "last_record_ms")

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError("a rate needs at least one sample of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms`` (Kafka's ``SampledStat.record``)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms
        self.last_record_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        window = self.window_size_ms(now_ms)
        return sum(s.value for s in self._samples) / (window / 1000.0)

    def window_size_ms(self, now_ms: int) -> int:
        """The elapsed time the rate is measured over (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms, now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return min(self._samples, key=lambda s: s.start_ms)

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for s in self._samples:
            if now_ms - s.last_event_ms >= expire:
                s.reset(now_ms)


def throttle_ms(observed: float, bound: float, window_ms: int) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: (O - T) / T * W, rounded; 0 within the quota."""
    if observed <= bound:
        return 0
    return int(math.floor((observed - bound) / bound * window_ms + 0.5))  # Java's Math.round

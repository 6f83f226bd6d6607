"""Fakes shared by the shim's unit tests."""

from __future__ import annotations


class FakeClock:
    """A ``time.time`` stand-in that only the test moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

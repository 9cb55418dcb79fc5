"""A suite's time budget: cases start only while the time left covers what a case of that kind
took so far, so a device call of bounded length ends on time with what it measured written, and
says what it skipped."""

from __future__ import annotations

import time
from typing import Callable, Optional


class Budget:
    """Seconds for a suite (None: unlimited). `start(kind)` says whether a case may start;
    `done(kind, seconds)` records how long it took."""

    def __init__(self, seconds: Optional[float], margin: float = 1.25, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.deadline = None if seconds is None else clock() + seconds
        self.margin = margin
        self.longest: dict = {}
        self.skipped: list[str] = []

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - self.clock()

    def start(self, kind: str, case: str) -> bool:
        """True if a case of `kind` (its longest so far, with a margin) fits in the time left;
        otherwise the case is recorded as skipped."""
        need = self.longest.get(kind, 0.0) * self.margin
        if self.left() > need:
            return True
        self.skipped.append(case)
        return False

    def done(self, kind: str, seconds: float) -> None:
        self.longest[kind] = max(self.longest.get(kind, 0.0), seconds)

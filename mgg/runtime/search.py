"""MGG's cross-iteration search over (ps, dist, wpb) (§6), one candidate per training iteration.

Start at (1, 1, 1), or where a cost model says (mgg.runtime.cost); grow ps while latency falls
(from a start inside the lattice, shrink it when growing does not help), then dist, then wpb;
retreat ps one step and retry wpb; then hill-climb from the best (measure its untried
neighbours, one step along one axis, and move while one is faster). That is MGG's search.
Because a latency surface can have several basins, budget left over then goes to exploration:
the untried config farthest from everything measured (with a cost model, in turn with the
untried config the model rates best) is probed and climbed from when it enters the top 3; three
probes in a row that do not enter the top 3 end the search. Every measured config stays in a
lookup table."""

from __future__ import annotations

import math
from typing import Callable, Iterator, Optional

from ..plan import Config
from .limits import DIST_STEPS, PS_STEPS, WPB_STEPS

AXES = (("ps", PS_STEPS), ("dist", DIST_STEPS), ("wpb", WPB_STEPS))


def _step(config: Config, axis: str, delta: int) -> Optional[Config]:
    steps = dict(AXES)[axis]
    i = steps.index(getattr(config, axis)) + delta
    if not 0 <= i < len(steps):
        return None
    return Config(**{**config.__dict__, axis: steps[i]})


class MggSearch:
    def __init__(
        self,
        is_feasible: Callable[[Config], bool] = lambda c: True,
        budget: int = 15,
        start: Config = Config(1, 1, 1),
        prior: Optional[Callable[[Config], float]] = None,
    ):
        """Args:
        is_feasible: whether a config may be measured (the device's limits, a model's pruning).
        budget: most configs measured.
        start: the first config (MGG: (1, 1, 1); a cost model's best).
        prior: an estimate of latency (a cost model's); exploration then alternates between
            the untried config it rates best and the one farthest from everything measured.
        """
        self.is_feasible = is_feasible
        self.prior = prior
        self.budget = budget
        self.table: dict[Config, float] = {}
        self.trajectory: list[tuple[Config, float]] = []
        self._gen = self._plan(start)
        self._pending: Optional[Config] = None
        self._done = False
        self._probes = 0

    # ---- public protocol: propose() a config, run it, report() its latency ----------------------
    def propose(self) -> Optional[Config]:
        if self._pending is not None:
            return self._pending
        if self._done or len(self.trajectory) >= self.budget:
            self._done = True
            return None
        try:
            self._pending = next(self._gen)
        except StopIteration:
            self._done = True
        return self._pending

    def report(self, config: Config, latency: float) -> None:
        if config != self._pending:
            raise ValueError(f"reported {config} but the pending candidate is {self._pending}")
        self._pending = None
        self.table[config] = float(latency)
        self.trajectory.append((config, float(latency)))

    @property
    def done(self) -> bool:
        return self.propose() is None

    @property
    def best(self) -> Optional[Config]:
        return min(self.table, key=self.table.get) if self.table else None

    def top(self, k: int = 3) -> list[Config]:
        return sorted(self.table, key=self.table.get)[:k]

    def run(self, measure: Callable[[Config], float]) -> Config:
        while (c := self.propose()) is not None:
            self.report(c, measure(c))
        return self.best

    # ---- the search, as a generator of candidates ------------------------------------------------
    def _try(self, c: Optional[Config]) -> bool:
        return c is not None and c not in self.table and self.is_feasible(c)

    def _grow(self, base: Config, axis: str, delta: int = +1) -> Iterator[Config]:
        """Steps `axis` up (delta +1) or down (-1) from base while latency falls."""
        cur = base
        while True:
            nxt = _step(cur, axis, delta)
            if not self._try(nxt):
                return
            yield nxt
            if self.table[nxt] >= self.table[cur]:
                return
            cur = nxt

    def _plan(self, start: Config) -> Iterator[Config]:
        if not self.is_feasible(start):
            lattice = [Config(p, 1, 1) for p in PS_STEPS] + [
                Config(p, d, w) for p in PS_STEPS for d in DIST_STEPS for w in WPB_STEPS
            ]
            start = next((c for c in lattice if self.is_feasible(c)), None)
            if start is None:
                return
        yield start
        for axis in ("ps", "dist", "wpb"):
            base = self.best
            yield from self._grow(base, axis, +1)
            if self.best == base:  # a start inside the lattice (a model's seed) may lie above the best
                yield from self._grow(base, axis, -1)
        back = _step(self.best, "ps", -1)
        if self._try(back):
            yield back
            yield from self._grow(back, "wpb")
        yield from self._climb(self.best)
        misses = 0
        while misses < 3:
            probe = self._probe()
            if probe is None:
                return
            yield probe
            if probe in self.top(3):
                misses = 0
                yield from self._climb(probe)
            else:
                misses += 1

    def _climb(self, center: Config) -> Iterator[Config]:
        """Hill-climbs from center: measures its untried neighbours (one step along one axis)
        and moves to the best of them while that beats the center."""
        while True:
            for axis, _ in AXES:
                for d in (-1, 1):
                    n = _step(center, axis, d)
                    if self._try(n):
                        yield n
            near = [n for axis, _ in AXES for d in (-1, 1) if (n := _step(center, axis, d)) in self.table]
            nxt = min(near, key=self.table.get, default=None)
            if nxt is None or self.table[nxt] >= self.table[center]:
                return
            center = nxt

    def _probe(self) -> Optional[Config]:
        """The next exploration probe: the farthest untried config, or, with a prior, the one it
        rates best and the farthest in turn."""
        self._probes += 1
        if self.prior is None or self._probes % 2 == 0:
            return self._farthest()
        untried = [
            c for c in (Config(p, d, w) for p in PS_STEPS for d in DIST_STEPS for w in WPB_STEPS) if self._try(c)
        ]
        return min(untried, key=lambda c: (self.prior(c), c.as_tuple()), default=None)

    def _farthest(self) -> Optional[Config]:
        def coords(c):
            return tuple(steps.index(getattr(c, axis)) for axis, steps in AXES)

        seen = [coords(c) for c in self.table]
        best, best_d = None, -1.0
        for p in PS_STEPS:
            for d in DIST_STEPS:
                for w in WPB_STEPS:
                    c = Config(p, d, w)
                    if not self._try(c):
                        continue
                    x = coords(c)
                    dist = min(math.dist(x, y) for y in seen)
                    if dist > best_d:
                        best, best_d = c, dist
        return best

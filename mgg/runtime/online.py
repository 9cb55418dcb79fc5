"""Online tuning inside training: each forward aggregation of a layer measures one candidate
config (MGG §6, one per iteration); once the search ends the best config stays. Every config
gives the same result, so results are correct at every iteration."""
from __future__ import annotations

from typing import Optional

import torch

from ..ops import aggregate
from ..plan import Config, Plan
from .cache import ConfigCache, cache_key
from .model import DeviceLimits, feasible
from .search import MggSearch
from .timing import time_once


class OnlineTuner:
    def __init__(self, budget: int = 15, cache: Optional[ConfigCache] = None, use_cache: bool = True):
        self.budget = budget
        self.cache = cache if cache is not None or not use_cache else ConfigCache()
        self.search: Optional[MggSearch] = None
        self.chosen: Optional[Config] = None
        self._key = None

    def _start(self, x: torch.Tensor, plan: Plan):
        limits = DeviceLimits.of(x.device)
        dim = x.size(1)
        self._key = cache_key(plan.graph.fingerprint(), plan.num_ranks, limits.name, dim, str(x.dtype).split(".")[-1])
        hit = self.cache.get(self._key) if self.cache is not None else None
        if hit is not None:
            self.chosen = hit
            return
        self.search = MggSearch(lambda c: feasible(c, dim, limits), self.budget)

    def aggregate(self, x: torch.Tensor, plan: Plan, deterministic: bool = False) -> torch.Tensor:
        if self.chosen is None and self.search is None:
            self._start(x, plan)
        if self.chosen is not None:
            return aggregate(x, plan, self.chosen, deterministic=deterministic)
        cand = self.search.propose()
        if cand is None:  # search over: keep the best
            self.chosen = self.search.best
            if self.cache is not None and self.chosen is not None:
                self.cache.put(self._key, self.chosen, self.search.table[self.chosen], self.search.table)
            return aggregate(x, plan, self.chosen, deterministic=deterministic)
        out, ms = time_once(lambda: aggregate(x, plan, cand, deterministic=deterministic), x.device)
        self.search.report(cand, ms)
        return out

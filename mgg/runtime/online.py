"""Online tuning inside training (MGG §6): each aggregation of a layer measures one candidate
config until the search ends, then the best config stays. Every config computes the same
aggregation, so results are correct at every iteration.

The tuner runs on the step that will run (runtime/targets.py): a one-rank plan, this rank's step
of a DistPlan under torchrun, or all ranks of a plan in one process. Over a process group, rank 0
alone owns the search and the cache: before each step it decides (measure a candidate, or keep a
final config) and broadcasts that decision, every rank runs the config it received and times
its own step after a barrier, and the step time is the slowest rank's (runtime/coordination.py).
A rank that runs another config than rank 0 cannot exist: no other rank decides.

The search is MGG's, seeded and pruned by a model of every rank's step: on a GPU the range
kernel's performance model (runtime/kernel_model.py), each rank predicting its own step from its
rows; on the CPU eq. 2-3 (runtime/cost.py). Schedules of configs that lost are dropped as the
search goes (bounded memory); the chosen config goes into the persistent cache, keyed by device,
graph, D, dtype, P, backend and fetch policy, so the next run starts tuned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..plan import Config
from .config_cache import ConfigCache
from .coordination import Coordinator, Decision, GroupCoordinator
from .cost import CostModel, LatencyModel, RankShape, predicted_us, same_launches
from .limits import DeviceLimits, feasible, grid
from .search import MggSearch
from .targets import target_of
from .timing import time_once

Timer = Callable[[Callable[[], object], Config], tuple]  # (step, config) -> (its result, ms)


@dataclass(frozen=True)
class Probe:
    """One tuning iteration as every rank saw it: the config run, this rank's time, the step
    time (the slowest rank's)."""

    config: Config
    own_ms: float
    step_ms: float


class OnlineTuner:
    """MGG's cross-iteration tuning of one layer's aggregation.

    Args:
        budget: most configs measured.
        cache: the config cache (None with use_cache: the default file).
        use_cache: read and write the cache at all.
        resume: start from a cached config when there is one (False: always search, then write).
        fallback: the config run if no config is feasible.
        coordinator: how ranks agree (default: one process, or the DistPlan's group).
        timer: times one step (default: time_once on the step's device); tests inject one.
        limits: the device's limits (default: DeviceLimits.of the input's device).
        model: seed and prune the search with a model (a GPU: the range kernel's performance
            model; the CPU: eq. 2-3); False: MGG's plain search from (1, 1, 1) over the feasible
            grid.
    """

    def __init__(
        self,
        budget: int = 15,
        cache: Optional[ConfigCache] = None,
        use_cache: bool = True,
        resume: bool = True,
        fallback: Config = Config(),
        coordinator: Optional[Coordinator] = None,
        timer: Optional[Timer] = None,
        limits: Optional[DeviceLimits] = None,
        model: bool = True,
    ):
        self.budget, self.resume, self.fallback = budget, resume, fallback
        self.cache = cache if cache is not None or not use_cache else ConfigCache()
        self.coordinator, self.timer, self.limits, self.use_model = coordinator, timer, limits, model
        self.search: Optional[MggSearch] = None  # rank 0 only
        self.cost: Optional[LatencyModel] = None  # rank 0 only
        self.chosen: Optional[Config] = None
        self.from_cache = False
        self.key: Optional[str] = None
        self.probes: list[Probe] = []
        self._hit: Optional[Config] = None
        self._best: Optional[Probe] = None
        self._started = False

    # ---- what layers call ---------------------------------------------------------------------
    def aggregate(self, x: torch.Tensor, plan, deterministic: bool = False) -> torch.Tensor:
        """Aggregates x over a layer's plan (a one-rank Plan or a DistPlan) with the config of
        this iteration."""
        return self.run(target_of(plan), x, deterministic)

    def run(self, target, x: torch.Tensor, deterministic: bool = False):
        """One step of `target` on x: a candidate's measurement while the search lasts, then the
        chosen config. Over a group, every rank calls it at the same point.

        Args:
            target: a LocalTarget, DistTarget or InprocTarget (runtime/targets.py).
            x: the step's input.
            deterministic: bit-identical results from run to run.

        Returns:
            The step's result.
        """
        if self.chosen is not None:
            return target.run(x, self.chosen, deterministic)
        if not self._started:
            self._start(target, x)
        coord = self.coordinator
        d = coord.decide(self._next() if coord.rank == 0 else None)
        if d.final:
            self._finish(target, d.config)
            return target.run(x, d.config, deterministic)
        step = target.prepare(x, d.config, deterministic)
        coord.sync(x.device)
        timer = self.timer or (lambda step, config: time_once(step, x.device))
        out, ms = timer(step, d.config)
        probe = Probe(d.config, float(ms), coord.slowest(ms))
        if self.search is not None:
            self.search.report(d.config, probe.step_ms)
        self.probes.append(probe)
        self._keep_best(target, probe)
        return out

    @property
    def done(self) -> bool:
        return self.chosen is not None

    # ---- the steps of a tuning run ------------------------------------------------------------
    def _start(self, target, x: torch.Tensor) -> None:
        """Collective on the first call: shapes of every rank to rank 0, which looks up the cache
        and builds the search."""
        self._started = True
        if self.coordinator is None:
            self.coordinator = GroupCoordinator(target.group) if target.distributed else Coordinator()
        coord = self.coordinator
        limits = self.limits or DeviceLimits.of(x.device)
        dim = x.size(1)
        self.key = target.key(dim, x.dtype, limits.name)
        shapes = self._gather_shapes(target)
        predicted = None  # on a GPU: every rank's predicted time of each candidate, from its own rows
        if self.use_model and x.device.type == "cuda":
            candidates = grid(dim, limits, get=target.get)
            own = predicted_us(target.own_shards(), dim, x.element_size(), candidates, limits.name)
            predicted = coord.gather(own)
        if coord.rank != 0:
            return
        hit = self.cache.get(self.key) if self.cache is not None and self.resume else None
        if hit is not None:
            self._hit = hit
            return
        candidates = grid(dim, limits, get=target.get)
        if self.use_model and predicted is not None:  # a GPU: the range kernel's model
            combine = max if target.combine_on(x.device) == "max" else sum
            step = {c: combine(rank[i] for rank in predicted) for i, c in enumerate(candidates)}
            self.cost = LatencyModel(step.__getitem__, candidates, redundant=same_launches(candidates, target.get))
            self.search = self.cost.search(self.budget)
        elif self.use_model:
            self.cost = CostModel(
                shapes, dim, candidates, limits, target.combine_on(x.device), get=target.get, elem=x.element_size()
            )
            self.search = self.cost.search(self.budget)
        else:
            self.search = MggSearch(lambda c: feasible(c, dim, limits, target.get), self.budget)

    def _gather_shapes(self, target) -> list[RankShape]:
        """Every rank's shapes, in rank order."""
        own = target.own_shapes()
        width = len(own[0].as_list())
        flat = self.coordinator.gather([a for s in own for a in s.as_list()])
        return [RankShape.from_list(v[i : i + width]) for v in flat for i in range(0, len(v), width)]

    def _next(self) -> Decision:
        """Rank 0's decision before a step."""
        if self._hit is not None:
            return Decision(True, self._hit)
        c = self.search.propose()
        if c is None:
            return Decision(True, self.search.best or self.fallback)
        return Decision(False, c)

    def _keep_best(self, target, probe: Probe) -> None:
        """Drops the schedules of every config but the fastest so far (same on every rank: the
        step times are the all-reduced ones)."""
        if self._best is None or probe.step_ms < self._best.step_ms:
            if self._best is not None and self._best.config != probe.config:
                target.drop(self._best.config)
            self._best = probe
        else:
            target.drop(probe.config)

    def _finish(self, target, config: Config) -> None:
        self.chosen = config
        self.from_cache = not self.probes
        if self._best is not None and self._best.config != config:
            target.drop(self._best.config)
        s = self.search
        if self.coordinator.rank == 0 and s is not None and s.table and self.cache is not None:
            self.cache.put(self.key, config, s.table.get(config, float("nan")), s.table, [c for c, _ in s.trajectory])

    # ---- a checkpoint's ------------------------------------------------------------------------
    def state(self) -> dict:
        """What a checkpoint keeps: a finished tuning's choice and its measurements (a tuning still
        searching keeps nothing: a resumed run searches again)."""
        if self.chosen is None:
            return {}
        c = lambda k: [k.ps, k.dist, k.wpb, k.interleave]  # noqa: E731
        probes = [[*c(p.config), p.own_ms, p.step_ms] for p in self.probes]
        return dict(key=self.key, chosen=c(self.chosen), from_cache=self.from_cache, probes=probes)

    def restore(self, state: dict) -> None:
        """Takes up a finished tuning's choice (state()); an empty state leaves the tuner to search."""
        if not state:
            return
        self.key, self.from_cache = state["key"], bool(state["from_cache"])
        self.chosen = Config(*state["chosen"][:3], interleave=bool(state["chosen"][3]))
        self.probes = [Probe(Config(*p[:3], interleave=bool(p[3])), float(p[4]), float(p[5])) for p in state["probes"]]
        self._started = True

    # ---- what it found -----------------------------------------------------------------------
    def summary(self) -> dict:
        """The tuning run: key, trajectory (config and step time per iteration), chosen config,
        its step time, the gain over the first config measured, and whether it came from the cache.

        Returns:
            A dict (empty trajectory when the config came from the cache).
        """
        traj = [(p.config, p.step_ms) for p in self.probes]
        best = min((ms for c, ms in traj if c == self.chosen), default=float("nan"))
        return dict(
            key=self.key,
            chosen=self.chosen,
            chosen_ms=best,
            from_cache=self.from_cache,
            trajectory=traj,
            start_ms=traj[0][1] if traj else float("nan"),
            pruned=len(self.cost.pruned()) if self.cost is not None else 0,
        )

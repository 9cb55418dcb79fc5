"""What a training run records: a seed's progress epoch by epoch (Progress, what a checkpoint saves of
it) and its result (RunResult)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class RunResult:
    seed: int
    test_acc: float
    val_acc: float
    best_epoch: int
    epoch_ms: float
    epochs: int = 0  # epochs run (fewer than cfg.epochs when on_epoch stopped the run)
    tuning: list = field(default_factory=list)  # with autotune: each layer's OnlineTuner.summary()
    curve: list = field(default_factory=list)  # per epoch: (loss over all training nodes, val acc, test acc)


@dataclass
class Progress:
    """One seed's run so far: the epochs done, the best validation epoch, each epoch's training-step
    time and its (loss, validation accuracy, test accuracy)."""

    seed: int
    epoch: int = 0  # epochs done: the next epoch's index
    best: tuple = (-1.0, 0.0, 0)  # (validation accuracy, test accuracy, epoch) of the best validation
    times: list = field(default_factory=list)  # ms
    curve: list = field(default_factory=list)

    def add(self, ms: float, loss: float, val: float, test: float) -> None:
        """Records the epoch just run."""
        self.times.append(ms)
        self.curve.append((loss, val, test))
        if val > self.best[0]:
            self.best = (val, test, self.epoch)
        self.epoch += 1

    def result(self, tuning: list = ()) -> RunResult:
        val, test, epoch = self.best
        ms = statistics.median(self.times) if self.times else float("nan")
        return RunResult(self.seed, test, val, epoch, ms, self.epoch, list(tuning), list(self.curve))

    def as_dict(self) -> dict:
        return dict(seed=self.seed, epoch=self.epoch, best=list(self.best), times=self.times, curve=self.curve)

    @classmethod
    def from_dict(cls, d: dict) -> "Progress":
        return cls(
            int(d["seed"]),
            int(d["epoch"]),
            tuple(d["best"]),
            [float(t) for t in d["times"]],
            [tuple(c) for c in d["curve"]],
        )

"""How the ranks of a tuning run agree (MGG §6 over several GPUs): rank 0 alone decides each
candidate and every rank receives its decision, so all ranks always run one config; each rank
times its own step after a barrier, and the step time is the slowest rank's (all_reduce MAX).
One process is a group of one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from ..plan import Config


@dataclass(frozen=True)
class Decision:
    """What rank 0 tells every rank before a step: measure `config`, or (final) keep it."""

    final: bool
    config: Config

    def encode(self) -> list[int]:
        c = self.config
        return [int(self.final), c.ps, c.dist, c.wpb, int(c.interleave)]

    @staticmethod
    def decode(values) -> "Decision":
        final, ps, dist_, wpb, interleave = (int(v) for v in values)
        return Decision(bool(final), Config(ps, dist_, wpb, bool(interleave)))


def _sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Coordinator:
    """One process: it decides, and its time is the step time."""

    rank = 0
    world = 1

    def decide(self, decision: Optional[Decision]) -> Decision:
        """Rank 0's decision on every rank.

        Args:
            decision: rank 0's decision; ignored on every other rank (pass None there).

        Returns:
            The decision every rank runs.
        """
        return decision

    def slowest(self, ms: float) -> float:
        """The step time: the largest of every rank's `ms`."""
        return float(ms)

    def gather(self, values: list[int]) -> list[list[int]]:
        """Every rank's list of integers (all of the same length), in rank order."""
        return [list(values)]

    def sync(self, device: torch.device) -> None:
        """Waits until this rank's device is idle and every rank has arrived (before timing)."""
        _sync_device(torch.device(device))


class GroupCoordinator(Coordinator):
    """The ranks of a torch.distributed group (gloo or NCCL).

    Args:
        group: the process group (None: the default group).
    """

    def __init__(self, group=None):
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.root = dist.get_global_rank(group, 0) if group is not None else 0
        nccl = dist.get_backend(group) == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")

    def decide(self, decision: Optional[Decision]) -> Decision:
        mine = decision.encode() if self.rank == 0 else [0] * 5
        t = torch.tensor(mine, dtype=torch.int64, device=self.device)
        dist.broadcast(t, src=self.root, group=self.group)
        return Decision.decode(t.tolist())

    def slowest(self, ms: float) -> float:
        t = torch.tensor([float(ms)], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return float(t.item())

    def gather(self, values: list[int]) -> list[list[int]]:
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t, group=self.group)
        return [o.tolist() for o in out]

    def sync(self, device: torch.device) -> None:
        _sync_device(torch.device(device))
        dist.barrier(group=self.group)

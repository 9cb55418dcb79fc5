"""The warp-range schedule of a step under a config (csrc/core/schedule.h: the only per-config
state, O(warps): where each warp's nnz-balanced range starts, and the fixups of the rows its
boundaries cut), built by the mgg.range_schedule op, and the layout the ops receive a step in
(fields mgg._C.STEP_FIELDS, STEP_PARAMS)."""

from __future__ import annotations

from typing import Optional

import torch

from .. import _C, ops
from .config import Config
from .shard import Csr

STEP_FIELDS = tuple(_C.STEP_FIELDS)
STEP_PARAMS = tuple(_C.STEP_PARAMS)
RANGE_FIELDS = tuple(_C.RANGE_FIELDS)
FIXUP_FIELDS = tuple(_C.FIXUP_FIELDS)


def schedule_step(
    local_rowptr: torch.Tensor, remote_rowptr: Optional[torch.Tensor], config: Config
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The warp-range schedule of a step from its row pointers (CPU int64; remote None: no remote
    part) under `config`: ranges, fixups and the step's STEP_PARAMS."""
    ranges, fixups = ops.range_schedule(local_rowptr, remote_rowptr, config.ps, config.dist)
    slots = int(fixups[-1, 2]) if fixups.size(0) else 0
    remote_edges = 0 if remote_rowptr is None else int(remote_rowptr[-1])
    params = [
        config.ps,
        config.dist,
        config.wpb,
        int(config.interleave),
        slots,
        _C.landing_rows(config.ps, remote_edges),
    ]
    return ranges, fixups, params


class Schedule:
    """The warp-range schedule of one step (a CSR pair) under one config (csrc/core/schedule.h):
    ranges [warps + 1, 5] (RANGE_FIELDS: where each warp starts, its carry slots) and fixups
    [split rows, 3] (FIXUP_FIELDS), built by the extension's mgg::range_schedule."""

    def __init__(self, local: Csr, remote: Optional[Csr], config: Config):
        self.ranges, self.fixups, self._params = schedule_step(
            torch.from_numpy(local.rowptr), None if remote is None else torch.from_numpy(remote.rowptr), config
        )
        self.num_slots = self._params[STEP_PARAMS.index("num_slots")]
        self.config = config
        self._devices: dict = {}

    @property
    def num_warps(self) -> int:
        return self.ranges.size(0) - 1

    def params(self) -> list[int]:
        return list(self._params)

    def on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = str(device)
        if key not in self._devices:
            self._devices[key] = (self.ranges.to(device), self.fixups.to(device))
        return self._devices[key]


# The lists of a step the op does not run (the transposed step of a forward-only plan).
ABSENT_STEP = [None] * len(STEP_FIELDS)
ABSENT_PARAMS = [0, 1, 1, 1, 0, 1]

"""A rank's part of a prepared dataset (`mgg prepare`, mgg.data.prepared), read by every rank of a
group at once: `read_part(path)` gives this rank's rows (features, labels, split, the user's ids) as
tensors and the PartGraph of their in-edges, which a DistGraph takes in place of the whole graph.

The ranks agree before anyone allocates: each checks the manifest (format, version) and that its own
files are there at their sizes, and they compare what they found (the same prepare, a rank count
that divides its parts); then each reads its files, checking every byte against the manifest, and
they compare again. Any rank's problem ends every rank with the same line, naming the file and what
is wrong; no rank is left waiting for another."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from ..data.prepared import Manifest, Prepared, RankRows
from ..errors import MggError
from .comm import Exchange
from .part_graph import PartGraph


@dataclass
class Part:
    """This rank's share of a prepared dataset. x, y and the masks are its rows, in the order of its
    range of relabelled nodes; global_ids the user's id of each row; graph the rows' in-edges."""

    path: Path
    manifest: Manifest
    rows: RankRows
    graph: PartGraph
    x: torch.Tensor
    y: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    global_ids: torch.Tensor
    normalized: bool = False  # whether x holds normalised features already (the trainer's, in place)

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def num_classes(self) -> int:
        return self.manifest.num_classes

    @property
    def num_nodes(self) -> int:
        return self.manifest.num_nodes

    @property
    def split_counts(self) -> dict:
        """Nodes in each split over the whole graph (train, val, test)."""
        return dict(self.manifest.split_counts)

    @property
    def bytes_read(self) -> int:
        return self.rows.bytes_read


def agree(problem: Optional[str], group=None) -> None:
    """Every rank learns every rank's problem (None: none); if any has one, every rank raises the
    first rank's, naming it. A collective: each rank calls it at the same point."""
    world = dist.get_world_size(group)
    found: list = [None] * world
    dist.all_gather_object(found, problem, group=group)
    for r, p in enumerate(found):
        if p is not None:
            raise MggError(p if world == 1 else f"rank {r}: {p}")


def read_part(path, group=None) -> Part:
    """This rank's part of the prepared dataset at `path` (module docstring). A collective over
    `group` (default: the world)."""
    if not dist.is_initialized():
        raise MggError("mgg.distributed.read_part: torch.distributed is not initialised (launch with torchrun)")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    prepared, problem = None, None
    try:
        prepared = Prepared(path)
        prepared.check_present(prepared.parts_of(rank, world))
    except MggError as e:
        problem = str(e)
    ids: list = [None] * world
    dist.all_gather_object(ids, None if prepared is None else prepared.manifest.id, group=group)
    agree(problem, group)
    if len(set(ids)) != 1:
        other = next(r for r, i in enumerate(ids) if i != ids[0])
        raise MggError(
            f"rank {other} reads another prepare than rank 0 at {path} (manifest id {ids[other]} against "
            f"{ids[0]}): every rank must read the same prepared dataset (copy the same directory to every machine)"
        )
    rows = None
    try:
        rows = prepared.rows(rank, world)
    except MggError as e:
        problem = str(e)
    agree(problem, group)
    return part_of(prepared, rows, Exchange(group))


def part_of(prepared: Prepared, rows: RankRows, exchange) -> Part:
    """The Part of rows read from `prepared`, its PartGraph exchanging over `exchange`."""
    m = prepared.manifest
    graph = PartGraph(rows.rowptr, rows.col, rows.weight, rows.bounds, rows.rank, exchange, f"prepared:{m.id}")
    return Part(
        prepared.path,
        m,
        rows,
        graph,
        torch.from_numpy(rows.x),
        torch.from_numpy(rows.y),
        *(torch.from_numpy(rows.mask(s)) for s in ("train", "val", "test")),
        torch.from_numpy(np.ascontiguousarray(rows.ids)),
    )

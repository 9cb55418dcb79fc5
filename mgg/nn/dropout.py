"""Dropout of a layer's input features, two ways: torch's (F.dropout: a fresh draw from torch's
generator, PyG's semantics, the default of mgg.nn.models), or by node (masks="node": each element's
draw a hash of its row's global node id, its column, the training step and the layer,
mgg.ops.node_keep), so that one process, every rank count, every launch and Plexus's grid drop the
same elements and train the same model (`mgg train`'s)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import MggError
from ..functional import node_dropout

MASKS = ("torch", "node")


def node_ids(graph, rows: int, device) -> torch.Tensor:
    """The global node ids of the rows a model holds: a DistGraph's (the user's ids of its rows),
    else 0..rows-1."""
    ids = getattr(graph, "global_ids", None)
    if ids is None or ids.numel() != rows:
        return torch.arange(rows, device=device)
    return ids.to(device)


class FeatureDropout:
    """A model's input dropout: masks 'torch' or 'node' (module docstring), the seed of its draws and
    the training steps it has counted (advance(): once per training forward)."""

    def __init__(self, p: float, masks: str = "torch", seed: int = 0):
        if masks not in MASKS:
            raise MggError(f"dropout masks must be one of {MASKS}, got {masks!r}")
        self.p, self.masks, self.seed, self.step = p, masks, seed, 0

    def __call__(self, x: torch.Tensor, graph, layer: int, training: bool) -> torch.Tensor:
        if not training or self.p <= 0:
            return x
        if self.masks == "torch":
            return F.dropout(x, self.p, True)
        return node_dropout(x, node_ids(graph, x.size(0), x.device), self.p, self.seed, self.step, layer)

    def advance(self, training: bool) -> None:
        if training:
            self.step += 1

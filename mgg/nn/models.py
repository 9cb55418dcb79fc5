"""The models of the trainer and the benchmarks: Kipf & Welling's 2-layer GCN and an L-layer GIN.
`conv` lets the same model be built with PyG's layers (for comparisons)."""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from . import conv as mgg_conv


class GCN(nn.Module):
    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5,
                 conv_module=None, **conv_kwargs):
        super().__init__()
        Conv = conv_module.GCNConv if conv_module is not None else mgg_conv.GCNConv
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = nn.ModuleList(Conv(a, b, **conv_kwargs) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


class GIN(nn.Module):
    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int = 5, dropout: float = 0.5,
                 conv_module=None, **conv_kwargs):
        super().__init__()
        Conv = conv_module.GINConv if conv_module is not None else mgg_conv.GINConv
        dims = [in_dim] + [hidden] * num_layers
        self.convs = nn.ModuleList(
            Conv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b)), **conv_kwargs)
            for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.head = nn.Linear(hidden, out_dim)
        self.dropout = dropout

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
            x = F.dropout(x, self.dropout, self.training)
        return self.head(x)


def build(name: str, in_dim: int, out_dim: int, hidden: int | None = None, conv_module=None, **kw) -> nn.Module:
    if name == "gcn":
        return GCN(in_dim, hidden or 16, out_dim, conv_module=conv_module, **kw)
    if name == "gin":
        return GIN(in_dim, hidden or 64, out_dim, conv_module=conv_module, **kw)
    from ..errors import MggError
    raise MggError(f"model must be 'gcn' or 'gin', got {name!r}")

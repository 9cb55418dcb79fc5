"""The models of the trainer and the benchmarks, and the protocol each is trained with:
Kipf & Welling's 2-layer GCN, an L-layer GIN, PyG's GraphSAGE (examples/reddit.py) and
Veličković et al.'s GAT (PyG examples/gat.py). `conv_module` lets the same model be built with
PyG's layers (conv_module=torch_geometric.nn) for comparisons."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import nn

from ..errors import MggError
from .dropout import FeatureDropout
from .gat import GATConv
from .gcn_conv import GCNConv
from .gin_conv import GINConv


@dataclass(frozen=True)
class Protocol:
    """How a model is trained on a Planetoid graph unless the user says otherwise."""

    hidden: int  # hidden width (GAT: per head)
    dropout: float
    lr: float
    weight_decay: float
    decay_first_layer_only: bool  # Kipf & Welling decay the first layer's weights only
    epochs: int
    source: str


PROTOCOLS = {
    "gcn": Protocol(16, 0.5, 0.01, 5e-4, True, 200, "Kipf & Welling (PyG examples/gcn.py)"),
    "gin": Protocol(64, 0.5, 0.01, 5e-4, False, 200, "Xu et al.'s GIN layers with the GCN protocol's optimiser"),
    "sage": Protocol(
        256,
        0.5,
        0.01,
        5e-4,
        False,
        200,
        "PyG examples/reddit.py (2 mean SAGEConv, hidden 256, ReLU, dropout 0.5, Adam lr 0.01) "
        "with the Planetoid weight decay 5e-4",
    ),
    "gat": Protocol(
        8,
        0.6,
        0.005,
        5e-4,
        False,
        200,
        "Veličković et al. / PyG examples/gat.py (8 heads of 8, dropout 0.6 on inputs and attention, "
        "ELU, Adam lr 0.005, weight decay 5e-4)",
    ),
}


def _dropout_conv_act(model: nn.Module, x, edge_index, act):
    """dropout -> conv -> act per layer (no act after the last): GCN's and GAT's forward."""
    for i, conv in enumerate(model.convs):
        x = model.drop(x, edge_index, i, model.training)
        x = conv(x, edge_index)
        if i < len(model.convs) - 1:
            x = act(x)
    model.drop.advance(model.training)
    return x


class _Model(nn.Module):
    """What the models share: dropout (p) drawn as `masks` says (mgg.nn.dropout: 'torch' or 'node',
    each draw then a function of `dropout_seed`)."""

    def _dropout(self, p: float, masks: str, dropout_seed: int) -> None:
        self.dropout = p
        self.drop = FeatureDropout(p, masks, dropout_seed)

    def draws(self) -> dict:
        """The dropout's training steps counted (what the next mask depends on; a checkpoint keeps it)."""
        return dict(step=self.drop.step)

    def set_draws(self, d: dict) -> None:
        self.drop.step = int(d["step"])


class GCN(_Model):
    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        conv_module=None,
        masks: str = "torch",
        dropout_seed: int = 0,
        **conv_kwargs,
    ):
        super().__init__()
        Conv = conv_module.GCNConv if conv_module is not None else GCNConv
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = nn.ModuleList(Conv(a, b, **conv_kwargs) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self._dropout(dropout, masks, dropout_seed)

    def forward(self, x, edge_index):
        return _dropout_conv_act(self, x, edge_index, F.relu)


class GIN(_Model):
    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int = 5,
        dropout: float = 0.5,
        conv_module=None,
        masks: str = "torch",
        dropout_seed: int = 0,
        **conv_kwargs,
    ):
        super().__init__()
        Conv = conv_module.GINConv if conv_module is not None else GINConv
        dims = [in_dim] + [hidden] * num_layers
        self.convs = nn.ModuleList(
            Conv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b)), **conv_kwargs)
            for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
        self.head = nn.Linear(hidden, out_dim)
        self._dropout(dropout, masks, dropout_seed)

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x, edge_index))
            x = self.drop(x, edge_index, i + 1, self.training)
        self.drop.advance(self.training)
        return self.head(x)


class SAGE(_Model):
    """PyG examples/reddit.py's GraphSAGE: SAGEConv layers (mean aggregation), ReLU and dropout
    between them, none on the input."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        conv_module=None,
        masks: str = "torch",
        dropout_seed: int = 0,
        **conv_kwargs,
    ):
        super().__init__()
        if conv_module is not None:
            Conv = conv_module.SAGEConv
        else:
            from .sage import SAGEConv as Conv
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = nn.ModuleList(Conv(a, b, **conv_kwargs) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self._dropout(dropout, masks, dropout_seed)

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = self.drop(F.relu(x), edge_index, i + 1, self.training)
        self.drop.advance(self.training)
        return x


class GAT(_Model):
    """Veličković et al.'s GAT as in PyG examples/gat.py: dropout -> GATConv(in, hidden,
    heads) -> ELU -> dropout -> GATConv(hidden * heads, out, out_heads, concat=False); the
    attention coefficients are dropped with the same probability (or attention_dropout)."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.6,
        heads: int = 8,
        out_heads: int = 1,
        conv_module=None,
        attention_dropout: float | None = None,
        masks: str = "torch",
        dropout_seed: int = 0,
        **conv_kwargs,
    ):
        super().__init__()
        Conv = conv_module.GATConv if conv_module is not None else GATConv
        dims = [in_dim] + [hidden * heads] * (num_layers - 1)
        p = dropout if attention_dropout is None else attention_dropout
        self.convs = nn.ModuleList(Conv(a, hidden, heads=heads, dropout=p, **conv_kwargs) for a in dims[:-1])
        self.convs.append(Conv(dims[-1], out_dim, heads=out_heads, concat=False, dropout=p, **conv_kwargs))
        self._dropout(dropout, masks, dropout_seed)

    def forward(self, x, edge_index):
        return _dropout_conv_act(self, x, edge_index, F.elu)


MODELS = {"gcn": GCN, "gin": GIN, "sage": SAGE, "gat": GAT}


def build(name: str, in_dim: int, out_dim: int, hidden: int | None = None, conv_module=None, **kw) -> nn.Module:
    """A model by name.

    Args:
        name: 'gcn', 'gin', 'sage' or 'gat'.
        in_dim: input feature width.
        out_dim: number of classes.
        hidden: hidden width (GAT: per head); default the model's protocol (PROTOCOLS).
        conv_module: where the conv classes come from (torch_geometric.nn for PyG's); default mgg.nn.
        **kw: num_layers, dropout, masks ('torch': F.dropout; 'node': drawn by node id, the same for
            every rank count and the grid, mgg.nn.dropout), dropout_seed (of the 'node' draws), and
            keyword arguments of every conv layer (mgg's: config, autotune, deterministic).

    Returns:
        The model (an nn.Module taking (x, edge_index)).
    """
    if name not in MODELS:
        raise MggError(f"model must be one of {tuple(MODELS)}, got {name!r}")
    hidden = hidden or PROTOCOLS[name].hidden
    return MODELS[name](in_dim, hidden, out_dim, conv_module=conv_module, **kw)

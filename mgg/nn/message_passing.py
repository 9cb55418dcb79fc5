"""The base class of mgg's layers: PyG's MessagePassing where torch_geometric is installed, so that
PyG's tools which look for message-passing layers take mgg's as theirs (to_hetero's per-edge-type
calls, the explainers' edge masks), and nn.Module where it is not.

mgg's layers aggregate in one fused op, without MessagePassing.propagate. While a PyG propagate,
message, aggregate or message_and_aggregate hook is registered on a layer that can (GCNConv,
GINConv, SAGEConv), its aggregation runs through PyG's own propagate instead, so the hooks see
what PyG's layer shows them (per-edge messages, decomposed_layers' chunks) at PyG's speed, on one
process; a layer that cannot (GATConv: its scores are not PyG's edge_updater) refuses the hook
in one line at registration. torch's own forward hooks on the layer always work. An explainer's
edge mask (explain=True, _edge_mask) scales each message as PyG's explain_message does, through
mgg.functional.aggregate_edges, so the mask gets its gradient."""

from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import nn

from ..errors import MggError

try:
    with warnings.catch_warnings():  # PyG's own modules call torch.jit.script at import (torch 2.14 warns)
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated", category=FutureWarning)
        from torch_geometric.nn.conv import MessagePassing as _Base
except ImportError:  # PyG is optional: the layers work without it, as plain modules
    _Base = nn.Module

HOOKS = ("propagate", "message", "aggregate", "message_and_aggregate", "edge_update")
_HOOK_DICTS = tuple(f"_{kind}_forward{when}_hooks" for kind in HOOKS for when in ("_pre", ""))  # PyG's


def _refuse_hook(kind: str):
    def register(self, *args, **kwargs):
        raise MggError(
            f"{type(self).__name__}: register_{kind}_forward_(pre_)hook is not supported: this layer "
            f"aggregates in one fused op and never calls propagate(), so the hook would not run; use "
            f"torch's register_forward_hook / register_forward_pre_hook on the layer"
        )

    return register


def refuse_hooks(cls, kinds=HOOKS):
    """Makes cls refuse PyG hooks of `kinds` at registration (hooks its forward never runs)."""
    for kind in kinds:
        setattr(cls, f"register_{kind}_forward_pre_hook", _refuse_hook(kind))
        setattr(cls, f"register_{kind}_forward_hook", _refuse_hook(kind))
    return cls


class LayerBase(_Base):
    """What PyG's tools see of an mgg layer. Subclasses set aggr, flow and node_dim themselves."""

    def __init__(self):
        super().__init__()
        if _Base is nn.Module:  # the attributes PyG's MessagePassing would have set
            self._explain, self._edge_mask, self._loop_mask, self._apply_sigmoid = None, None, None, True

    def keep_decomposed_layers(self, value) -> None:
        """PyG's decomposed_layers argument, kept as PyG keeps it: its propagate (the path with
        hooks) chunks the features by it; the fused op gives the same result unchunked."""
        if not isinstance(value, int) or value < 1:
            raise MggError(f"{type(self).__name__}: decomposed_layers must be a positive integer, got {value!r}")
        self.decomposed_layers = value

    def hooked(self) -> bool:
        """Whether a PyG propagate/message/aggregate hook is registered: then the layer's
        aggregation runs through PyG's propagate (propagated), where the hooks run."""
        return any(getattr(self, d, None) for d in _HOOK_DICTS)

    def propagated(self, edge_index, **kwargs) -> torch.Tensor:
        """PyG's own MessagePassing.propagate over edge_index (a [2, E] tensor or a sparse
        adjacency), with the layer's message() and its aggr_module: the path with hooks."""
        name = type(self).__name__
        if not isinstance(edge_index, torch.Tensor) and not hasattr(edge_index, "sparse_sizes"):
            raise MggError(
                f"{name}: with a PyG propagate/message/aggregate hook registered the layer runs PyG's "
                f"propagate, which needs an edge_index [2, E] or a sparse adjacency, not a {type(edge_index).__name__}"
            )
        return self.propagate(edge_index, **kwargs)

    def _explain_mask(self, num_edges: int) -> Optional[torch.Tensor]:
        """The multiplier of each input edge's message while an explainer is attached (PyG's
        explain_message: sigmoid of the edge mask unless told otherwise), else None."""
        if not getattr(self, "_explain", None):
            return None
        mask = self._edge_mask
        if mask is None:
            raise MggError(f"{type(self).__name__}: explain=True but no edge mask was set (_edge_mask is None)")
        if mask.dim() != 1 or mask.numel() != num_edges:
            raise MggError(
                f"{type(self).__name__}: the explainer's edge mask has shape {tuple(mask.shape)}; the "
                f"input has {num_edges} edges"
            )
        return mask.sigmoid() if self._apply_sigmoid else mask


refuse_hooks(LayerBase, ("edge_update",))  # no mgg layer calls PyG's edge_updater


def explained_edges(
    name: str, edge_index, flow: str, why: str = "an explainer's edge mask"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, dst) of a [2, E] edge_index for per-edge message weights (`why`: an explainer's
    mask, learned weights); a sparse adjacency has no edge order for them."""
    if isinstance(edge_index, torch.Tensor) and hasattr(edge_index, "as_tensor"):
        edge_index = edge_index.as_tensor()
    if not isinstance(edge_index, torch.Tensor) or edge_index.layout != torch.strided or edge_index.dim() != 2:
        raise MggError(f"{name}: {why} needs edge_index [2, E] (not a sparse adjacency) in mgg")
    ei = edge_index.long()
    return (ei[1], ei[0]) if flow == "target_to_source" else (ei[0], ei[1])

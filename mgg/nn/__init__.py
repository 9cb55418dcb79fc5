"""PyG-compatible GNN layers whose aggregation runs through mgg.aggregate."""
from .conv import GCNConv, GINConv
from .models import GCN, GIN

__all__ = ["GCNConv", "GINConv", "GCN", "GIN"]

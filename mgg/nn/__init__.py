"""PyG-compatible GNN layers whose aggregation runs through mgg.aggregate."""
from .conv import GCNConv, GINConv
from .models import GAT, GCN, GIN, SAGE
from .sage import SAGEConv

__all__ = ["GCNConv", "GINConv", "SAGEConv", "GCN", "GIN", "SAGE", "GAT"]

"""PyG-compatible GNN layers whose aggregation runs through mgg.aggregate."""
from .conv import GCNConv, GINConv
from .gat import GATConv
from .models import GAT, GCN, GIN, SAGE
from .sage import SAGEConv

__all__ = ["GCNConv", "GINConv", "SAGEConv", "GATConv", "GCN", "GIN", "SAGE", "GAT"]
from .embedding import ShardedEmbeddingBag, ShardedEmbeddingBagCollection  # noqa: E402,F401

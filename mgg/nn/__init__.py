"""PyG-compatible GNN layers whose aggregation runs through mgg.aggregate, and sharded embedding
bags (DLRM) over the same op."""

from .conv import GCNConv, GINConv
from .embedding import ShardedEmbeddingBag, ShardedEmbeddingBagCollection
from .gat import GATConv
from .models import GAT, GCN, GIN, SAGE
from .sage import SAGEConv

__all__ = [
    "GCNConv",
    "GINConv",
    "SAGEConv",
    "GATConv",
    "GCN",
    "GIN",
    "SAGE",
    "GAT",
    "ShardedEmbeddingBag",
    "ShardedEmbeddingBagCollection",
]

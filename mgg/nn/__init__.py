"""PyG-compatible GNN layers whose aggregation runs through mgg's ops, and the models built of them.
(The sharded embedding bags are mgg.embedding's.)"""

from .gat import GATConv
from .gcn_conv import GCNConv
from .gin_conv import GINConv
from .graph_input import clear as clear_plans
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
    "clear_plans",
]

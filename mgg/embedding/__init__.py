"""Sharded embedding-bag lookups (MGG's DLRM result, Table 4), one wing: the per-batch plan of a
lookup (plan.py: bags as destinations, table rows as sources, vectorised), the bags that users
build (bags.py: ShardedEmbeddingBag, ShardedEmbeddingBagCollection, with torch.nn.EmbeddingBag's
interface), the lookups across ranks (exchange.py: the halo exchange and the all-to-all baseline;
nvshmem.py: peers' rows read in place from symmetric tables), what a lookup does with rows beside
the ops (rows.py), and the DLRM model with its Criteo-Kaggle-like synthetic batches (dlrm.py)."""

from .bags import ShardedEmbeddingBag, ShardedEmbeddingBagCollection

__all__ = ["ShardedEmbeddingBag", "ShardedEmbeddingBagCollection"]

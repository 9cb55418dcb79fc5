"""Prepared datasets (`mgg prepare`): a dataset partitioned once onto disk, so that each rank of a
run reads and holds only its part. layout.py is the format and its checked reads, read.py a rank's
rows and a grid's blocks, sources.py the datasets a prepare reads (streamed where their files allow),
edges.py and write.py the bounded-memory writing; mgg.partitioning.prepare runs a prepare."""

from .layout import FORMAT, VERSION, Manifest, is_prepared
from .read import Prepared, RankRows

__all__ = ["FORMAT", "VERSION", "Manifest", "Prepared", "RankRows", "is_prepared"]

"""mgg: full-graph GNN training on the GPUs of one node, MGG-style (OSDI'23).

The compiled ops are wrapped by mgg.ops, the one module that calls them; `mgg.aggregate` and
`mgg.attend` (mgg.functional) are the calls users make.
The packages, and what flows through them, are described in ARCHITECTURE.md."""

from ._extension import load as _load_extension

_load_extension()  # before anything touches mgg._C: a build for another torch is one clear ImportError

from . import data  # noqa: E402
from .devices import default_device  # noqa: E402
from .errors import GraphError, MggError, PlanError  # noqa: E402
from .functional import aggregate, attend, make_plan  # noqa: E402
from .graph import Graph  # noqa: E402
from .partitioning import Partition, partition  # noqa: E402
from .plan import Config, Plan, split_ranges  # noqa: E402
from .version import __version__  # noqa: E402, F401 (mgg.__version__)

__all__ = [
    "Graph",
    "Plan",
    "Config",
    "aggregate",
    "attend",
    "make_plan",
    "split_ranges",
    "partition",
    "Partition",
    "data",
    "default_device",
    "MggError",
    "GraphError",
    "PlanError",
]

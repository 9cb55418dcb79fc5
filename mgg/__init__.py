"""mgg: full-graph GNN training on the GPUs of one node, MGG-style (OSDI'23).

The aggregation op is torch.ops.mgg.aggregate; `mgg.aggregate` is its differentiable front."""
from ._extension import load as _load_extension

_load_extension()  # before anything touches mgg._C: a build for another torch is one clear ImportError

from . import io, synthetic  # noqa: E402
from .errors import GraphError, MggError, PlanError  # noqa: E402
from .graph import Graph  # noqa: E402
from .ops import aggregate, make_plan  # noqa: E402
from .partition import Partition, partition  # noqa: E402  (the function shadows the module's name)
from .plan import Config, Plan, split_ranges  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Graph", "Plan", "Config", "aggregate", "make_plan", "split_ranges", "partition", "Partition", "io",
           "synthetic", "MggError", "GraphError", "PlanError"]

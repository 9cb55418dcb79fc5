"""mgg: full-graph GNN training on the GPUs of one node, MGG-style (OSDI'23).

The aggregation op is torch.ops.mgg.aggregate; `mgg.aggregate` is its differentiable front."""
from .errors import GraphError, MggError, PlanError
from .graph import Graph
from .plan import Config, Plan, split_ranges
from .ops import aggregate, make_plan
from . import io, synthetic

__version__ = "0.1.0"
__all__ = ["Graph", "Plan", "Config", "aggregate", "make_plan", "split_ranges", "io", "synthetic",
           "MggError", "GraphError", "PlanError"]

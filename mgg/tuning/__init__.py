"""The tuner (MGG §6, which calls it the runtime): the resource model, the cost model (eq. 2-3),
the cross-iteration config search, the steps it tunes, how ranks agree, the online tuner, the
config cache."""

from .config_cache import ConfigCache
from .cost import CostModel, LatencyModel, RankShape
from .limits import DeviceLimits, feasible, grid, resources
from .search import MggSearch

__all__ = [
    "ConfigCache",
    "CostModel",
    "DeviceLimits",
    "LatencyModel",
    "MggSearch",
    "RankShape",
    "feasible",
    "grid",
    "resources",
]

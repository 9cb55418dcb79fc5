"""MGG's runtime (§6): the resource model, the cross-iteration config search, the config cache."""
from .cache import ConfigCache
from .model import DeviceLimits, feasible, grid, resources
from .search import MggSearch

__all__ = ["ConfigCache", "DeviceLimits", "feasible", "grid", "resources", "MggSearch"]

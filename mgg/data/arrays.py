"""Array helpers of the loaders and generators."""

from __future__ import annotations

import numpy as np


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique by one in-place sort (numpy 2's hash-based unique is many times slower on
    large int64 arrays). Sorts `a`."""
    a.sort()
    if a.size < 2:
        return a
    keep = np.empty(a.size, bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]

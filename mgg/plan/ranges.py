"""MGG Algorithm 1, the range-constrained binary search that cuts the row pointer into P
contiguous node ranges of about nnz/P edges each: the `range` method, and the default ranks of a
Plan."""

from __future__ import annotations

import numpy as np

from ..errors import PlanError


def split_ranges(rowptr, num_ranks: int) -> np.ndarray:
    """MGG Algorithm 1: node boundaries of P contiguous, edge-balanced ranges.

    Each boundary is found by binary search on rowptr, constrained to lie at or after the
    previous one; it is the row boundary nearest to the edge target r * ceil(nnz / P), so each
    rank is within one row's degree of the target.

    Args:
        rowptr: the CSR row pointer ([N + 1]).
        num_ranks: P.

    Returns:
        int64 [P + 1]: b[0] = 0 <= b[1] <= ... <= b[P] = N; rank r owns rows [b[r], b[r+1]).
    """
    rowptr = np.asarray(rowptr, dtype=np.int64)
    n = rowptr.size - 1
    if not isinstance(num_ranks, (int, np.integer)) or num_ranks < 1:
        raise PlanError(f"ranks must be a positive integer, got {num_ranks!r}")
    if num_ranks > n:
        raise PlanError(f"ranks ({num_ranks}) exceed the number of nodes ({n})")
    nnz = int(rowptr[-1])
    per = -(-nnz // num_ranks)  # ePerGPU = ceil(nnz / P)
    bounds = np.zeros(num_ranks + 1, dtype=np.int64)
    bounds[-1] = n
    last = 0
    for r in range(1, num_ranks):
        target = min(r * per, nnz)
        # binary search on rowptr[last:]: the first boundary with at least `target` edges before it
        i = last + int(np.searchsorted(rowptr[last:], target, side="left"))
        if i > last and target - rowptr[i - 1] < rowptr[i] - target:
            i -= 1  # the boundary just before is nearer the target
        # every rank keeps at least one node, so ranges stay non-empty
        i = min(max(i, last + 1), n - (num_ranks - r))
        bounds[r] = i
        last = i
    return bounds

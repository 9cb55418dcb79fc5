"""What a lookup does with rows outside the mgg ops, shared by every path of the wing: the
gradient of a table from the rows a batch read (dense, or sparse as torch.nn.EmbeddingBag(sparse=
True) gives it), and mode 'max', which the kernels do not reduce (torch's scatter_reduce)."""

from __future__ import annotations

import torch


def scatter_rows(index: torch.Tensor, values: torch.Tensor, rows: int, sparse: bool) -> torch.Tensor:
    """The gradient of a table of `rows` rows whose rows `index` received `values`."""
    if sparse:
        return torch.sparse_coo_tensor(index.unsqueeze(0), values, (rows, values.size(1)), check_invariants=False)
    return values.new_zeros((rows, values.size(1))).index_add_(0, index, values)


def segment_max(src: torch.Tensor, bag: torch.Tensor, num_bags: int) -> torch.Tensor:
    """Per bag, the elementwise max of its edges' rows src (0 for an empty bag), differentiable:
    the gradient goes to the maximal entries."""
    out = src.new_zeros((num_bags, src.size(1)))
    return out.scatter_reduce(0, bag.unsqueeze(1).expand_as(src), src, "amax", include_self=False)

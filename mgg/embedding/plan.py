"""Embedding-bag lookups as bipartite aggregations, planned per batch (MGG's DLRM result).

An embedding-bag lookup aggregates table rows (sources) into bags (destinations) over edges that
change every batch. This module turns a batch into the `plan` / `params` lists of the mgg ops
with vectorised torch ops only (sort-based unique, searchsorted, bincount, cumsum; no Python loop
over indices), so a plan costs little next to the lookup itself:

- `bag_edges` validates an `torch.nn.EmbeddingBag`-style batch (`input` + `offsets` or 2-D
  `input`, `per_sample_weights`, `padding_idx`, `include_last_offset`, mode sum / mean / max)
  and gives its edges (row id, bag id, weight), sorted by bag; nothing is computed before every
  argument has been checked, and a bad one is a one-line MggError naming it.
- `BatchStep` is one PE's step for a batch: the rows of the table are split into contiguous
  ranges, one per PE (`row_bounds`); the PE's bags read their rows from its own range (local
  part, ids rebased to the range) or from peers (remote part: the owner PE and the offset in
  its range for aggregate_peers, or the slot in a halo of distinct remote rows for aggregate:
  a row asked for twice is fetched once). Its backward step is compact: its rows are the
  distinct rows the batch reads (sorted global ids), its sources the bags, so it never costs
  O(table rows) per batch; the gradient is scattered into the table afterwards (dense or sparse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .. import ops
from ..errors import MggError
from ..plan import ABSENT_PARAMS, ABSENT_STEP, STEP_FIELDS, Config, schedule_step

MODES = ("sum", "mean", "max")


def row_bounds(num_rows: int, parts: int, what: str = "num_embeddings") -> torch.Tensor:
    """Boundaries of `parts` contiguous, balanced row ranges (int64 [parts + 1]); each range is
    non-empty, so a table needs at least `parts` rows."""
    if not isinstance(num_rows, int) or num_rows < 1:
        raise MggError(f"{what} must be a positive integer, got {num_rows!r}")
    if num_rows < parts:
        raise MggError(f"{what} ({num_rows}) is fewer than the PEs ({parts}) its rows are split across")
    return torch.arange(parts + 1, dtype=torch.int64) * num_rows // parts


@dataclass
class Edges:
    """A batch's lookups: edge e reads row idx[e] into bag bag[e] (non-decreasing), scaled by
    weight[e] (None: 1)."""

    idx: torch.Tensor  # int64 [E]
    bag: torch.Tensor  # int64 [E]
    weight: Optional[torch.Tensor]  # [E]
    num_bags: int
    ptr: Optional[torch.Tensor] = None  # int64 [num_bags + 1]: bag b's edges are [ptr[b], ptr[b+1])
    position: Optional[torch.Tensor] = None  # where each edge is in input.reshape(-1) (None: edge e at e)

    def bag_ptr(self) -> torch.Tensor:
        if self.ptr is None:
            self.ptr = torch.zeros(self.num_bags + 1, dtype=torch.int64)
            torch.cumsum(torch.bincount(self.bag.cpu(), minlength=self.num_bags), 0, out=self.ptr[1:])
        return self.ptr


def _int_tensor(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise MggError(f"{name} must be a tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int64, torch.int32):
        raise MggError(f"{name} must be int64 or int32, got {t.dtype}")
    return t.long()


def bag_edges(
    input,
    offsets,
    per_sample_weights,
    num_embeddings: int,
    mode: str = "mean",
    padding_idx: Optional[int] = None,
    include_last_offset: bool = False,
    weight_dtype: torch.dtype = torch.float32,
) -> Edges:
    """The edges of an EmbeddingBag batch, checked (torch.nn.functional.embedding_bag's
    arguments).

    Args:
        input: int [E] with offsets, or int [B, L] (B bags of L rows, offsets None).
        offsets: int [B] (start of each bag), or [B + 1] with include_last_offset (the last
            entry is len(input)); must start at 0 and not decrease.
        per_sample_weights: float, shaped like input (mode 'sum' only), or None.
        num_embeddings: rows of the table; every index must be in [0, num_embeddings).
        mode: 'sum', 'mean' (weights 1 / bag size, after padding is dropped) or 'max' (weights
            None; the caller reduces).
        padding_idx: entries equal to it are left out of their bags (negative: from the end).
        include_last_offset: as torch.
        weight_dtype: dtype of the edge weights.

    Returns:
        Edges, sorted by bag.
    """
    if mode not in MODES:
        raise MggError(f"mode must be one of {MODES}, got {mode!r}")
    input = _int_tensor(input, "input")
    if input.dim() == 2:
        if offsets is not None:
            raise MggError("offsets must be None when input is 2-D [bags, indices per bag]")
        num_bags, per = input.shape
        bag = torch.arange(num_bags, device=input.device).repeat_interleave(per)
    elif input.dim() == 1:
        if offsets is None:
            raise MggError("offsets is required when input is 1-D")
        offsets = _int_tensor(offsets, "offsets")
        if offsets.dim() != 1:
            raise MggError(f"offsets must be 1-D, got {offsets.dim()}-D")
        n = input.numel()
        num_bags = offsets.numel() - (1 if include_last_offset else 0)
        if num_bags < 0:
            raise MggError("offsets must have at least one entry with include_last_offset=True")
        idx = input
        # every check in one host round trip: min, max, first and last offset, decreases, index range
        facts = (
            [offsets.min(), offsets.max(), offsets[0], offsets[-1], (offsets[1:] < offsets[:-1]).sum()]
            if offsets.numel()
            else [offsets.new_zeros(())] * 5
        )
        if n:
            facts += [idx.min(), idx.max()]
        facts = torch.stack([f.long() for f in facts]).tolist()
        if offsets.numel():
            lo, hi, first, last, decreases = facts[:5]
            if lo < 0:
                raise MggError(f"offsets must not be negative, got {lo}")
            if first != 0:
                raise MggError(f"offsets[0] must be 0, got {first}")
            if hi > n:
                raise MggError(f"offsets must be at most len(input) = {n}, got {hi}")
            if decreases:
                k = int((offsets[1:] < offsets[:-1]).nonzero()[0, 0]) + 1
                raise MggError(
                    f"offsets must not decrease, but offsets[{k}] = {int(offsets[k])} < "
                    f"offsets[{k - 1}] = {int(offsets[k - 1])}"
                )
            if include_last_offset and last != n:
                raise MggError(f"offsets[-1] must equal len(input) = {n} with include_last_offset=True, got {last}")
        elif n:
            raise MggError(f"offsets is empty but input has {n} indices")
        ends = (
            offsets[1:]
            if include_last_offset
            else torch.cat([offsets[1:], torch.full((1,), n, dtype=torch.int64, device=offsets.device)])
        )
        counts = ends - offsets[:num_bags]
        bag = torch.repeat_interleave(torch.arange(num_bags, device=input.device), counts, output_size=n)
        index_range = facts[5:]
    else:
        raise MggError(f"input must be 1-D (with offsets) or 2-D, got {input.dim()}-D")
    idx = input.reshape(-1)
    if input.dim() == 2 and idx.numel():
        index_range = torch.stack([idx.min(), idx.max()]).tolist()
    elif input.dim() == 2:
        index_range = []
    if index_range:
        lo, hi = index_range
        if lo < 0 or hi >= num_embeddings:
            bad = lo if lo < 0 else hi
            raise MggError(f"input holds index {bad}, outside [0, {num_embeddings}) (the table's rows)")
    psw = per_sample_weights
    if psw is not None:
        if mode != "sum":
            raise MggError(f"per_sample_weights needs mode='sum', got mode={mode!r}")
        if not isinstance(psw, torch.Tensor) or not psw.is_floating_point():
            raise MggError("per_sample_weights must be a floating-point tensor")
        if psw.shape != input.shape:
            raise MggError(f"per_sample_weights must be shaped like input {tuple(input.shape)}, got {tuple(psw.shape)}")
        psw = psw.reshape(-1)
    if padding_idx is not None:
        if not isinstance(padding_idx, int) or not -num_embeddings <= padding_idx < num_embeddings:
            raise MggError(
                f"padding_idx must be an integer in [-{num_embeddings}, {num_embeddings}), got {padding_idx!r}"
            )
        keep = (idx != (padding_idx % num_embeddings)).nonzero().squeeze(1)
        idx, bag, position = idx[keep], bag[keep], keep
        psw = None if psw is None else psw[keep]
    ptr = None
    if padding_idx is None:
        position = None
        if input.dim() == 2:
            ptr = torch.arange(num_bags + 1, dtype=torch.int64) * input.size(1)
        else:
            ptr = torch.zeros(num_bags + 1, dtype=torch.int64)
            torch.cumsum(counts.cpu(), 0, out=ptr[1:])
    weight = None
    if psw is not None:
        weight = psw.detach().to(weight_dtype)
    elif mode == "mean":
        size = torch.bincount(bag, minlength=num_bags)
        weight = (1.0 / size.to(weight_dtype))[bag]
    return Edges(idx, bag, weight, int(num_bags), ptr, position)


def merge(parts: list, row_shift: list) -> Edges:
    """The edges of several batches of one bag count B as one batch: part t's bags become bags
    [t * B, (t + 1) * B), its row ids are row_shift[t](idx) (a callable) or idx + row_shift[t]."""
    B = parts[0].num_bags
    idx = torch.cat([f(e.idx.cpu()) if callable(f) else e.idx.cpu() + f for e, f in zip(parts, row_shift, strict=True)])
    bag = torch.cat([e.bag.cpu() + t * B for t, e in enumerate(parts)])
    weighted = any(e.weight is not None for e in parts)
    w = None
    if weighted:
        dt = next(e.weight.dtype for e in parts if e.weight is not None)
        w = torch.cat([e.weight.cpu() if e.weight is not None else torch.ones(e.idx.numel(), dtype=dt) for e in parts])
    ptr = None
    if all(e.ptr is not None for e in parts):
        base = torch.tensor([0] + [e.idx.numel() for e in parts]).cumsum(0)
        ptr = torch.cat([parts[0].ptr[:1]] + [e.ptr[1:] + base[t] for t, e in enumerate(parts)])
    return Edges(idx, bag, w, len(parts) * B, ptr)


class BatchStep:
    """One PE's step of a batch (rows [row_begin, row_end) of the table are the PE's own), in
    the op's layout; built with vectorised torch ops on the CPU, then moved to `device`.

    Attributes:
        plan, params: the forward step of mgg.ops.aggregate (remote sources are halo
            slots) or aggregate_peers (remote sources are (PE, offset)); no transposed step.
        plan_t, params_t: the backward step, over compact rows `rows` (the distinct rows read,
            sorted global ids) from the bags (built on first use: a forward without grad skips it).
        rows: int64 [U] the distinct rows read; rows[local_begin:local_end] are the PE's own.
        halo: int64 [H] the distinct remote rows (rows without the own block), by owner then id.
        halo_pe: int64 [H] their owners.
    """

    def __init__(
        self,
        edges: Edges,
        bounds: torch.Tensor,
        pe: int,
        config: Config = Config(),
        peers: bool = False,
        device="cpu",
        bag_begin: int = 0,
        bag_end: Optional[int] = None,
        edge_begin: int = 0,
        edge_end: Optional[int] = None,
    ):
        bag_end = edges.num_bags if bag_end is None else bag_end
        sl = slice(edge_begin, edges.idx.numel() if edge_end is None else edge_end)
        ptr = edges.bag_ptr()[bag_begin : (edges.num_bags if bag_end is None else bag_end) + 1] - edge_begin
        idx, bag = edges.idx[sl].cpu(), edges.bag[sl].cpu() - bag_begin
        w = None if edges.weight is None else edges.weight[sl].cpu()
        nb = bag_end - bag_begin
        lo, hi = int(bounds[pe]), int(bounds[pe + 1])
        self.num_bags, self.row_begin, self.row_end, self.pe = nb, lo, hi, pe
        # one stable sort gives the distinct rows, each edge's row among them, and the order of
        # the backward step's edges (by row, then bag)
        wide = int(bounds[-1]) >= 2**31
        key = idx if wide else idx.int()
        sorted_key, order = torch.sort(key, stable=True)
        rows, inv_sorted, counts = torch.unique_consecutive(sorted_key, return_inverse=True, return_counts=True)
        rows = rows.long()
        inv = torch.empty_like(inv_sorted)
        inv[order] = inv_sorted
        a, b = (int(v) for v in torch.searchsorted(rows, torch.tensor([lo, hi])))
        self.rows, self.local_begin, self.local_end = rows, a, b
        self.inverse, self.bag = inv, bag  # per edge: its distinct row, its bag (for max)
        self.halo = torch.cat([rows[:a], rows[b:]])
        self.halo_pe = torch.searchsorted(bounds, self.halo, right=True) - 1
        halo_offset = (self.halo - bounds[self.halo_pe]).int()
        i32 = torch.int32
        is_local = (key >= lo) & (key < hi)
        loc = is_local.nonzero().squeeze(1)
        rem = (~is_local).nonzero().squeeze(1) if loc.numel() < key.numel() else loc[:0]
        # bag b's local edges: the local edges among its edges [ptr[b], ptr[b+1])
        seen = torch.zeros(key.numel() + 1, dtype=torch.int64)
        torch.cumsum(is_local, 0, out=seen[1:])
        local_rowptr = seen[ptr]
        local_col = (key[loc] - lo).to(i32)
        step = dict.fromkeys(STEP_FIELDS)
        step.update(
            local_rowptr=local_rowptr,
            local_col=local_col,
            local_weight=None if w is None else w[loc],
            halo_pe=self.halo_pe.to(i32),
            halo_offset=halo_offset,
        )
        remote_rowptr = None
        if rem.numel():
            remote_rowptr = ptr - local_rowptr
            r_inv = inv[rem]
            slot = torch.where(r_inv < a, r_inv, r_inv - (b - a))
            if peers:
                owner = self.halo_pe[slot]
                step.update(remote_col=(idx[rem] - bounds[owner]).to(i32), remote_pe=owner.to(i32))
            else:
                step.update(remote_col=slot.to(i32))
            step.update(remote_rowptr=remote_rowptr, remote_weight=None if w is None else w[rem])
        step["ranges"], step["fixups"], params = schedule_step(local_rowptr, remote_rowptr, config)
        self._device = torch.device(device)
        self.plan = [self._on(step[f]) for f in STEP_FIELDS] + ABSENT_STEP
        self.params = params + ABSENT_PARAMS
        self.num_local_edges, self.num_remote_edges = loc.numel(), rem.numel()
        self._t = (order, counts, w, config)  # the backward step is built when a backward needs it

    def _on(self, t):
        return t if t is None or self._device.type == "cpu" else t.to(self._device, non_blocking=True)

    def _build_t(self) -> None:
        """The backward step: row u of the distinct rows sums grad[bag_e] * w_e over the edges
        that read it (in bag order)."""
        order, counts, w, config = self._t
        tstep = dict.fromkeys(STEP_FIELDS)
        t_rowptr = torch.zeros(counts.numel() + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=t_rowptr[1:])
        tstep.update(
            local_rowptr=t_rowptr,
            local_col=self.bag[order].to(torch.int32),
            local_weight=None if w is None else w[order],
        )
        tstep["ranges"], tstep["fixups"], params_t = schedule_step(t_rowptr, None, config)
        self._plan_t = [self._on(tstep[f]) for f in STEP_FIELDS] + ABSENT_STEP
        self._params_t = params_t + ABSENT_PARAMS

    @property
    def plan_t(self) -> list:
        if not hasattr(self, "_plan_t"):
            self._build_t()
        return self._plan_t

    @property
    def params_t(self) -> list:
        if not hasattr(self, "_params_t"):
            self._build_t()
        return self._params_t

    @property
    def num_rows(self) -> int:
        return self.row_end - self.row_begin

    @property
    def local_rows(self) -> torch.Tensor:
        """The distinct own rows read, as offsets into the PE's range."""
        return self.rows[self.local_begin : self.local_end] - self.row_begin

    def grad_rows(self, grad: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """The gradient of the distinct rows read [U, D] from the gradient of the bags [bags, D]
        (the backward step through mgg.ops.aggregate)."""
        g = grad.contiguous()
        return ops.aggregate(g, g.new_empty((0, g.size(1))), self.plan_t, self.params_t, deterministic)

    def split_grad(self, grad_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(gradient of the own distinct rows, gradient of the halo rows in halo order)."""
        a, b = self.local_begin, self.local_end
        return grad_rows[a:b], torch.cat([grad_rows[:a], grad_rows[b:]])


def pe_slices(edges: Edges, parts: int) -> list[tuple[int, int, int, int]]:
    """Contiguous, balanced bag ranges, one per PE, and their edge ranges: [(bag_begin, bag_end,
    edge_begin, edge_end)] (the bags of one process split among emulated PEs)."""
    bb = torch.arange(parts + 1, dtype=torch.int64) * edges.num_bags // parts
    eb = edges.bag_ptr()[bb].tolist()
    bb = bb.tolist()
    return [(bb[p], bb[p + 1], eb[p], eb[p + 1]) for p in range(parts)]

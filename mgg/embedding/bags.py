"""Sharded embedding bags (MGG's DLRM result, Table 4): `ShardedEmbeddingBag`, the interface of
torch.nn.EmbeddingBag with its rows split across PEs, and `ShardedEmbeddingBagCollection`,
several tables (DLRM has 26) sharded table-wise or row-wise and looked up in one call.

A lookup is a bipartite aggregation (bags <- table rows) over edges that change every batch; each
batch gets a plan of its own (mgg.embedding.plan.BatchStep, vectorised torch ops), and modes
'sum' and 'mean' (with per_sample_weights: weighted sums) run through the mgg ops:

- one process, one PE: mgg.ops.aggregate over the table;
- one process, several PEs (`num_pes`): the table's row ranges are the PEs' tables, each PE's
  share of the bags is aggregated by mgg.ops.aggregate_peers, which reads remote rows from
  their owner's table by (PE, offset), as the NVSHMEM path reads them on GPUs;
- under torchrun (an initialised process group): each rank holds only its rows and looks up its
  own batch, with the `halo` backend (distinct remote rows fetched once by an all-to-all, then
  the op), the `nvshmem` backend (aggregate_peers reads peers' rows in place from symmetric
  tables: mgg.embedding.nvshmem; not yet run on GPUs) or the `alltoall` baseline
  (torchrec's row-wise scheme: mgg.embedding.exchange).

Mode 'max' has no reduction in the kernels: it is computed with torch (scatter_reduce 'amax' over
the rows the batch reads, fetched the same way), not through the mgg ops.

The backward runs the batch's compact transposed step through the op (rows: the distinct rows
read; no O(table rows) work per batch) and scatters the result into the table's gradient, dense
or, with sparse=True, a sparse COO tensor (as torch.nn.EmbeddingBag(sparse=True)).
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import ops
from ..errors import MggError
from ..plan import Config
from .plan import MODES, BatchStep, Edges, bag_edges, merge, pe_slices, row_bounds
from .rows import scatter_rows, segment_max


class _PeersLookup(torch.autograd.Function):
    """Every PE's bags, each PE through mgg.ops.aggregate_peers over the PEs' tables (row
    ranges of weight); the backward runs each PE's compact transposed step through the op."""

    @staticmethod
    def forward(ctx, weight, steps, slices, bounds, sparse, deterministic, fetch):
        b = bounds.tolist()
        shards = [weight[b[p] : b[p + 1]] for p in range(len(steps))]
        outs = [
            ops.aggregate_peers(shards[p], shards, p, s.plan, s.params, ops.fetch_code(fetch), deterministic)
            for p, s in enumerate(steps)
        ]
        ctx.steps, ctx.slices, ctx.sparse, ctx.det, ctx.rows = steps, slices, sparse, deterministic, weight.size(0)
        return torch.cat(outs)

    @staticmethod
    def backward(ctx, grad):
        index, values = [], []
        for s, (b0, b1, _, _) in zip(ctx.steps, ctx.slices, strict=True):
            values.append(s.grad_rows(grad[b0:b1], ctx.det))
            index.append(s.rows.to(grad.device))
        gw = scatter_rows(torch.cat(index), torch.cat(values), ctx.rows, ctx.sparse)
        return gw, None, None, None, None, None, None


class _WeightGrad(torch.autograd.Function):
    """Zeros [bags, D] whose backward gives per_sample_weights their gradient,
    d psw_e = <grad[bag_e], weight[idx_e]> (torch ops; the lookup itself runs through the op with
    the weights as constants), 0 for entries left out (padding_idx)."""

    @staticmethod
    def forward(ctx, psw, weight, edges):
        ctx.save_for_backward(weight)
        ctx.edges, ctx.shape = edges, psw.shape
        return weight.new_zeros((edges.num_bags, weight.size(1)))

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        e = ctx.edges
        dev = grad.device
        per_edge = (grad.index_select(0, e.bag.to(dev)) * weight.index_select(0, e.idx.to(dev))).sum(1)
        n = 1
        for k in ctx.shape:
            n *= k
        g = per_edge.new_zeros(n)
        if e.position is None:
            g.copy_(per_edge)
        else:
            g[e.position.to(dev)] = per_edge
        return g.view(ctx.shape), None, None


class _ShardedRows(torch.nn.Module):
    """A table of `num_rows` rows split into the contiguous ranges `bounds` (one per PE) and its
    lookup: what both modules share. Under an initialised process group (distributed=None: auto)
    this rank holds only its range."""

    def __init__(
        self,
        num_rows: int,
        embedding_dim: int,
        bounds: torch.Tensor,
        sparse: bool,
        distributed: Optional[bool],
        group,
        backend: str,
        config: Optional[Config],
        deterministic: bool,
        fetch: str,
        device,
        dtype,
    ):
        super().__init__()
        from .exchange import EMBEDDING_BACKENDS

        if not isinstance(embedding_dim, int) or embedding_dim < 1:
            raise MggError(f"embedding_dim must be a positive integer, got {embedding_dim!r}")
        if backend not in EMBEDDING_BACKENDS:
            raise MggError(f"backend must be one of {EMBEDDING_BACKENDS}, got {backend!r}")
        ops.fetch_code(fetch)
        if distributed is None:
            distributed = dist.is_available() and dist.is_initialized()
        self.distributed, self.group, self.backend = bool(distributed), group, backend
        self.num_rows, self.embedding_dim, self.sparse = num_rows, embedding_dim, sparse
        self.config, self.deterministic, self.fetch = config or Config(), deterministic, fetch
        self.register_buffer("bounds", bounds, persistent=False)
        self.rank = dist.get_rank(group) if self.distributed else 0
        self.num_pes = bounds.numel() - 1
        if self.distributed and dist.get_world_size(group) != self.num_pes:
            raise MggError(
                f"the table is split across {self.num_pes} PEs but the process group has "
                f"{dist.get_world_size(group)} ranks"
            )
        lo, hi = (int(bounds[self.rank]), int(bounds[self.rank + 1])) if self.distributed else (0, num_rows)
        self.row_begin, self.row_end = lo, hi
        self.weight = torch.nn.Parameter(torch.empty((hi - lo, embedding_dim), device=device, dtype=dtype))
        from .exchange import Traffic

        self.traffic = Traffic()
        if self.distributed and backend == "nvshmem":
            from ..distributed import nvshmem

            nvshmem.init(group)  # MggError, one line, where NVSHMEM cannot run (no GPU, no nvshmem4py)

    def _weight_dtype(self) -> torch.dtype:
        return torch.float64 if self.weight.dtype == torch.float64 else torch.float32

    def _lookup(self, edges: Edges, mode: str) -> torch.Tensor:
        """The bags [edges.num_bags, D] of edges (global row ids of this module's table)."""
        from . import exchange as de

        w, bounds = self.weight, self.bounds.cpu()
        if self.distributed:
            self.traffic = de.Traffic()
            if self.backend == "nvshmem":
                from .nvshmem import nvshmem_lookup

                return nvshmem_lookup(
                    w,
                    edges,
                    bounds,
                    self.rank,
                    mode,
                    self.config,
                    self.fetch,
                    self.sparse,
                    self.deterministic,
                    self.traffic,
                )
            if self.backend == "alltoall":
                return de.alltoall_lookup(
                    w, edges, bounds, self.rank, self.num_pes, mode, self.group, self.sparse, self.traffic
                )
            return de.halo_lookup(
                w,
                edges,
                bounds,
                self.rank,
                self.num_pes,
                mode,
                self.config,
                self.group,
                self.sparse,
                self.deterministic,
                self.traffic,
            )
        if mode == "max":  # torch, not the kernels (they have no max reduction)
            src = F.embedding(edges.idx.to(w.device), w, sparse=self.sparse)
            return segment_max(src, edges.bag.to(w.device), edges.num_bags)
        if self.num_pes == 1:
            step = BatchStep(edges, bounds, 0, self.config, device=w.device)
            return de._StepLookup.apply(w, w.new_empty((0, w.size(1))), step, self.sparse, self.deterministic)
        slices = pe_slices(edges, self.num_pes)
        steps = [
            BatchStep(
                edges,
                bounds,
                p,
                self.config,
                peers=True,
                device=w.device,
                bag_begin=b0,
                bag_end=b1,
                edge_begin=e0,
                edge_end=e1,
            )
            for p, (b0, b1, e0, e1) in enumerate(slices)
        ]
        return _PeersLookup.apply(w, steps, slices, bounds, self.sparse, self.deterministic, self.fetch)

    def _own(self, full: torch.Tensor) -> torch.Tensor:
        return full[self.row_begin : self.row_end] if self.distributed else full

    def _gather_rows(self) -> torch.Tensor:
        """The whole (virtual) table: this process's rows, or every rank's (a collective)."""
        if not self.distributed:
            return self.weight.detach()
        most = int((self.bounds[1:] - self.bounds[:-1]).max())
        pad = self.weight.detach().new_zeros((most, self.embedding_dim))
        pad[: self.weight.size(0)] = self.weight.detach()
        parts = [torch.empty_like(pad) for _ in range(self.num_pes)]
        dist.all_gather(parts, pad, group=self.group)
        sizes = (self.bounds[1:] - self.bounds[:-1]).tolist()
        return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)])


def _dist_kwargs(distributed, group, backend, config, deterministic, fetch, device, dtype):
    return dict(
        distributed=distributed,
        group=group,
        backend=backend,
        config=config,
        deterministic=deterministic,
        fetch=fetch,
        device=device,
        dtype=dtype,
    )


def _num_pes(num_pes: Optional[int], distributed: Optional[bool], group) -> int:
    on = dist.is_available() and dist.is_initialized() if distributed is None else distributed
    if on:
        world = dist.get_world_size(group)
        if num_pes not in (None, world):
            raise MggError(f"num_pes ({num_pes}) differs from the process group's {world} ranks")
        return world
    num_pes = 1 if num_pes is None else num_pes
    if not isinstance(num_pes, int) or num_pes < 1:
        raise MggError(f"num_pes must be a positive integer, got {num_pes!r}")
    return num_pes


class ShardedEmbeddingBag(_ShardedRows):
    """torch.nn.EmbeddingBag with its rows split row-wise across PEs (contiguous, balanced
    ranges), looked up through the mgg ops over a per-batch plan (see the module's doc).

    Args:
        num_embeddings, embedding_dim, mode, padding_idx, include_last_offset, sparse: as
            torch.nn.EmbeddingBag (mode 'max' is computed with torch, not the kernels).
        num_pes: PEs the rows are split across on one process (default 1); under an initialised
            process group, the group's ranks (each rank then holds only its rows as `weight`).
        distributed: None: whether a process group is initialised.
        group: the process group.
        backend: under torchrun, 'halo' (mgg over torch.distributed), 'nvshmem' (mgg's fused kernel
            reading peers' rows in place; GPUs with nvshmem4py; sum and mean) or 'alltoall' (the
            torchrec-style baseline).
        config: the plans' Config (ps, dist, wpb).
        deterministic: bit-identical results from run to run.
        fetch: how aggregate_peers reads remote rows (one process, or the nvshmem backend:
            mgg._C.FETCH; 'get-warp' for NVSHMEM gets).
        device, dtype: of the weight.
        _weight: initial weight [num_embeddings, D] (the whole table; each rank keeps its rows).

    Attributes:
        weight: [num_embeddings, D] on one process; [own rows, D] under torchrun (rows
            [row_begin, row_end) of the table).
        traffic: bytes this rank sent in the last distributed forward.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        mode: str = "mean",
        padding_idx: Optional[int] = None,
        include_last_offset: bool = False,
        sparse: bool = False,
        num_pes: Optional[int] = None,
        distributed: Optional[bool] = None,
        group=None,
        backend: str = "halo",
        config: Optional[Config] = None,
        deterministic: bool = False,
        fetch: str = "direct",
        device=None,
        dtype=None,
        _weight: Optional[torch.Tensor] = None,
    ):
        if mode not in MODES:
            raise MggError(f"mode must be one of {MODES}, got {mode!r}")
        pes = _num_pes(num_pes, distributed, group)
        bounds = row_bounds(num_embeddings, pes)
        if padding_idx is not None:
            if not isinstance(padding_idx, int) or not -num_embeddings <= padding_idx < num_embeddings:
                raise MggError(f"padding_idx must be within num_embeddings ({num_embeddings}), got {padding_idx!r}")
            padding_idx %= num_embeddings
        super().__init__(
            num_embeddings,
            embedding_dim,
            bounds,
            sparse,
            **_dist_kwargs(distributed, group, backend, config, deterministic, fetch, device, dtype),
        )
        self.num_embeddings, self.mode = num_embeddings, mode
        self.padding_idx, self.include_last_offset = padding_idx, include_last_offset
        if _weight is not None:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise MggError(f"_weight must be [{num_embeddings}, {embedding_dim}], got {tuple(_weight.shape)}")
            with torch.no_grad():
                self.weight.copy_(self._own(_weight))
        else:
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, 1) rows, the padding row zero (as torch.nn.EmbeddingBag)."""
        torch.nn.init.normal_(self.weight)
        p = self.padding_idx
        if p is not None and self.row_begin <= p < self.row_end:
            with torch.no_grad():
                self.weight[p - self.row_begin].fill_(0)

    def forward(
        self,
        input: torch.Tensor,
        offsets: Optional[torch.Tensor] = None,
        per_sample_weights: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """The bags [B, D] of this process's batch (torch.nn.EmbeddingBag.forward's arguments)."""
        edges = bag_edges(
            input,
            offsets,
            per_sample_weights,
            self.num_embeddings,
            self.mode,
            self.padding_idx,
            self.include_last_offset,
            self._weight_dtype(),
        )
        out = self._lookup(edges, self.mode)
        psw = per_sample_weights
        if psw is not None and psw.requires_grad and torch.is_grad_enabled():
            if self.distributed:
                raise MggError(
                    "per_sample_weights that require grad are supported on one process only (under "
                    "torchrun the rows they multiply live on other ranks)"
                )
            out = out + _WeightGrad.apply(psw, self.weight, edges)
        return out

    def full_weight(self) -> torch.Tensor:
        """The whole table [num_embeddings, D] (under torchrun: gathered from every rank)."""
        return self._gather_rows()

    def extra_repr(self) -> str:
        return (
            f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}, num_pes={self.num_pes}"
            f"{', distributed, backend=' + repr(self.backend) if self.distributed else ''}"
        )


class ShardedEmbeddingBagCollection(_ShardedRows):
    """Several embedding-bag tables of one dim (DLRM's sparse features), sharded across PEs
    table-wise (each table whole on one PE, tables placed largest first on the PE with the fewest
    rows) or row-wise (every table split in contiguous ranges across all PEs), and looked up in
    one call: all tables form one virtual table whose rows are grouped by PE, and every (table,
    sample) pair is a bag of one per-batch plan, so a batch of 26 features is one op call.
    'mixed' (what DLRM deployments do): tables of at least `row_wise_min_rows` rows row-wise, the
    others table-wise (Criteo Kaggle has tables of 3 and 4 rows, fewer than 4 PEs).

    Args:
        num_embeddings: rows of each table.
        embedding_dim, mode, include_last_offset, sparse: as torch.nn.EmbeddingBag, for every table.
        sharding: 'table', 'row' or 'mixed'.
        row_wise_min_rows: with 'mixed', the smallest table split row-wise.
        num_pes, distributed, group, backend, config, deterministic, fetch, device, dtype: as
            ShardedEmbeddingBag.
        _weights: initial tables (one [num_embeddings[t], D] tensor each).
    """

    def __init__(
        self,
        num_embeddings: Sequence[int],
        embedding_dim: int,
        mode: str = "sum",
        sharding: str = "table",
        include_last_offset: bool = False,
        sparse: bool = False,
        num_pes: Optional[int] = None,
        distributed: Optional[bool] = None,
        group=None,
        backend: str = "halo",
        config: Optional[Config] = None,
        deterministic: bool = False,
        fetch: str = "direct",
        device=None,
        dtype=None,
        _weights: Optional[Sequence[torch.Tensor]] = None,
        row_wise_min_rows: int = 65536,
    ):
        if mode not in MODES:
            raise MggError(f"mode must be one of {MODES}, got {mode!r}")
        if sharding not in ("table", "row", "mixed"):
            raise MggError(f"sharding must be 'table', 'row' or 'mixed', got {sharding!r}")
        sizes = list(num_embeddings)
        if not sizes:
            raise MggError("num_embeddings must list at least one table")
        for t, n in enumerate(sizes):
            if not isinstance(n, int) or n < 1:
                raise MggError(f"num_embeddings[{t}] must be a positive integer, got {n!r}")
        pes = _num_pes(num_pes, distributed, group)
        # segments of the virtual table: (table, first row, rows, PE), grouped by PE
        segs, load = [], [0] * pes
        whole = list(range(len(sizes)))  # tables placed whole (table-wise)
        if sharding != "table":
            split = [t for t in whole if sharding == "row" or sizes[t] >= max(row_wise_min_rows, pes)]
            whole = [t for t in whole if t not in split]
            for t in split:
                b = row_bounds(sizes[t], pes, f"num_embeddings[{t}]").tolist()
                segs += [(t, b[p], b[p + 1] - b[p], p) for p in range(pes)]
                for p in range(pes):
                    load[p] += b[p + 1] - b[p]
        elif len(sizes) < pes:
            raise MggError(
                f"num_embeddings lists {len(sizes)} tables, fewer than the {pes} PEs of table-wise "
                f"sharding (use sharding='row' or 'mixed')"
            )
        for t in sorted(whole, key=lambda t: -sizes[t]):
            p = min(range(pes), key=lambda q: (load[q], q))
            load[p] += sizes[t]
            segs.append((t, 0, sizes[t], p))
        if any(v == 0 for v in load):
            raise MggError(f"num_embeddings: a PE would hold no rows (PE loads {load}); use fewer PEs or more tables")
        segs.sort(key=lambda s: (s[3], s[0]))
        per_pe = [0] * pes
        for s in segs:
            per_pe[s[3]] += s[2]
        bounds = torch.zeros(pes + 1, dtype=torch.int64)
        torch.cumsum(torch.tensor(per_pe), 0, out=bounds[1:])
        super().__init__(
            sum(sizes),
            embedding_dim,
            bounds,
            sparse,
            **_dist_kwargs(distributed, group, backend, config, deterministic, fetch, device, dtype),
        )
        self.num_embeddings, self.mode, self.sharding = sizes, mode, sharding
        self.include_last_offset = include_last_offset
        table_base = [0]
        for n in sizes:
            table_base.append(table_base[-1] + n)
        self.table_base = torch.tensor(table_base)
        # the virtual id of global row g (table_base[t] + i): g - seg_start[s] + seg_virtual[s]
        starts, virtual, v = [], [], 0
        for t, first, n, _ in segs:
            starts.append(table_base[t] + first)
            virtual.append(v)
            v += n
        order = sorted(range(len(segs)), key=lambda k: starts[k])
        self._seg_start = torch.tensor([starts[k] for k in order])
        self._seg_virtual = torch.tensor([virtual[k] for k in order])
        self.table_pe = [sorted({s[3] for s in segs if s[0] == t}) for t in range(len(sizes))]
        # per table: its segments' first rows and the shift to their virtual rows
        self._table_segs = []
        for t in range(len(sizes)):
            mine = sorted((first, v - first) for (tt, first, _, _), v in zip(segs, virtual, strict=True) if tt == t)
            self._table_segs.append(
                (
                    torch.tensor([m[0] for m in mine]),
                    torch.tensor([m[1] for m in mine]),
                    mine[0][1] if len(mine) == 1 else None,
                )
            )
        if _weights is not None:
            self.load_tables(_weights)
        else:
            torch.nn.init.normal_(self.weight)

    @property
    def num_tables(self) -> int:
        return len(self.num_embeddings)

    def virtual_rows(self, table: int, rows: torch.Tensor) -> torch.Tensor:
        """Rows of table `table` as rows of the virtual table (grouped by PE)."""
        return self._to_virtual(rows.long().cpu() + int(self.table_base[table]))

    def _to_virtual(self, g: torch.Tensor) -> torch.Tensor:
        s = torch.searchsorted(self._seg_start, g, right=True) - 1
        return g - self._seg_start[s] + self._seg_virtual[s]

    def _table_virtual(self, t: int, rows: torch.Tensor) -> torch.Tensor:
        starts, shifts, single = self._table_segs[t]
        if single is not None:  # the table is one segment (table-wise)
            return rows + single
        return rows + shifts[torch.searchsorted(starts, rows, right=True) - 1]

    def load_tables(self, weights: Sequence[torch.Tensor]) -> None:
        """Sets every table from its whole [num_embeddings[t], D] weight (each rank keeps its rows)."""
        if len(weights) != self.num_tables:
            raise MggError(f"_weights must hold {self.num_tables} tables, got {len(weights)}")
        full = self.weight.new_empty((self.num_rows, self.embedding_dim))
        for t, w in enumerate(weights):
            if tuple(w.shape) != (self.num_embeddings[t], self.embedding_dim):
                raise MggError(
                    f"_weights[{t}] must be [{self.num_embeddings[t]}, {self.embedding_dim}], got {tuple(w.shape)}"
                )
            full[self.virtual_rows(t, torch.arange(w.size(0))).to(full.device)] = w.to(full)
        with torch.no_grad():
            self.weight.copy_(self._own(full))

    def table_weight(self, table: int) -> torch.Tensor:
        """Table `table`'s rows [num_embeddings[t], D] in its own order (under torchrun: gathered,
        a collective)."""
        full = self._gather_rows()
        return full[self.virtual_rows(table, torch.arange(self.num_embeddings[table])).to(full.device)]

    def forward(
        self,
        inputs: Sequence[torch.Tensor],
        offsets: Optional[Sequence[Optional[torch.Tensor]]] = None,
        per_sample_weights: Optional[Sequence[Optional[torch.Tensor]]] = None,
    ) -> torch.Tensor:
        """The bags of every table: [B, tables, D].

        Args:
            inputs: per table, the input of torch.nn.EmbeddingBag (1-D with offsets, or 2-D).
            offsets: per table (None: every input is 2-D).
            per_sample_weights: per table, or None (mode 'sum' only).
        """
        T = self.num_tables
        for name, seq in (("inputs", inputs), ("offsets", offsets), ("per_sample_weights", per_sample_weights)):
            if seq is not None and len(seq) != T:
                raise MggError(f"{name} must list one entry per table ({T}), got {len(seq)}")
        if (
            per_sample_weights is not None
            and torch.is_grad_enabled()
            and any(isinstance(p, torch.Tensor) and p.requires_grad for p in per_sample_weights)
        ):
            raise MggError(
                "per_sample_weights that require grad are supported by ShardedEmbeddingBag on one process, "
                "not by the collection"
            )
        wdt = self._weight_dtype()
        edges = []
        for t in range(T):
            try:
                edges.append(
                    bag_edges(
                        inputs[t],
                        None if offsets is None else offsets[t],
                        None if per_sample_weights is None else per_sample_weights[t],
                        self.num_embeddings[t],
                        self.mode,
                        None,
                        self.include_last_offset,
                        wdt,
                    )
                )
            except MggError as e:
                raise MggError(f"table {t}: {e}") from None
        B = edges[0].num_bags
        if any(e.num_bags != B for e in edges):
            raise MggError(f"every table must have the same number of bags; got {[e.num_bags for e in edges]}")
        merged = merge(edges, [functools.partial(self._table_virtual, t) for t in range(T)])
        out = self._lookup(merged, self.mode)  # bag t * B + b
        return out.view(T, B, self.embedding_dim).transpose(0, 1)

"""The mgg ops' CUDA kernels run by the SIMT emulator on real mgg plans (simt/emulator.py):
each rank's step written as a runner case the way the op files fill kernels::Step and
kernels::Attention, every rank of a Plan run in one runner process, the outputs returned as
tensors in the order of the graph's rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mgg import Config, Plan, ops
from mgg.plan import STEP_FIELDS
from simt import emulator

F = {name: i for i, name in enumerate(STEP_FIELDS)}
SOURCES = ["table", "direct", "get-thread", "get-warp", "get-block"]  # table: halo buffer (or none: one rank)


def _step(plan_list: list) -> dict:
    """The forward step's tensors by field name (weights as fp32, as the CUDA op passes them)."""
    s = {name: plan_list[i] for name, i in F.items()}
    for w in ("local_weight", "remote_weight"):
        if s[w] is not None:
            s[w] = s[w].float()
    return s


def _step_values(rp, s: dict, params: list, x: torch.Tensor, seed: int) -> dict:
    """The scalar values of a forward step's case: storage, sizes and the launch parameters."""
    ps, dist, wpb, interleave, num_slots, landing_rows = params[:6]
    return dict(
        storage=emulator.STORAGE[x.dtype],
        seed=seed,
        dim=x.size(1),
        rows=rp.num_rows,
        num_ranges=s["ranges"].size(0),
        num_fixups=s["fixups"].size(0),
        ps=ps,
        dist=dist,
        wpb=wpb,
        interleave=interleave,
        num_slots=num_slots,
        landing_rows=landing_rows,
    )


def _peer_tables(tables: list, offset: int = 0) -> tuple[dict, int]:
    """Each PE's table in a symmetric heap of the largest table's size (NaN past its rows),
    starting `offset` elements into the heap (the same on every PE, as a symmetric object is)."""
    rows = max(t.size(0) for t in tables)
    heaps = {}
    for pe, t in enumerate(tables):
        h = torch.full((rows, t.size(1)), float("nan"), dtype=t.dtype)
        h[: t.size(0)] = t
        heaps[f"peer{pe}"] = _after(offset, h)
    return heaps, (offset + rows * tables[0].size(1)) * tables[0].element_size()


def _pe_values(source: str, completion: str, rank: int, n: int, heap_bytes: int) -> dict:
    return dict(source=source, completion=completion, my_pe=rank, n_pes=n, heap_bytes=heap_bytes)


def aggregate(
    folder: Path,
    plan: Plan,
    x: torch.Tensor,
    config: Config,
    source: str = "table",
    completion: str = "loadstore",
    deterministic: bool = False,
    seed: int = 0,
    trace: bool = False,
    counters: bool = False,
    halo_gather: bool = False,
    table_offset: int = 0,
) -> torch.Tensor:
    """A @ x over every rank of `plan`, each rank's step by the emulated kernels reading remote
    rows from `source` (gets completed as `completion` says: loadstore or proxy), scheduled by
    `seed`; the rows of all ranks in graph order. trace: each rank's folder keeps the
    emulator's trace of warp and block calls (trace.txt). counters: each rank's folder keeps the
    memory counters (counters.txt; emulator.counters_of reads them). halo_gather: run each
    rank's halo gather step instead (the `once` mode's read of each halo row from its owner; a
    peers source), returning every rank's halo rows, rank after rank. table_offset: the tables
    (the halo table and this rank's, or every PE's in its heap) start that many elements into
    their arrays, as a tensor sliced from a larger one does (rows off the 16-byte grid for an
    offset that is not a multiple of 16 bytes)."""
    if halo_gather and source == "table":
        raise ValueError("the halo gather reads peers' tables: give a peers source")
    b = plan.bounds
    own = [x[int(b[r]) : int(b[r + 1])].contiguous() for r in range(plan.num_ranks)]
    heaps, heap_bytes = _peer_tables(own, table_offset)
    folders, shapes = [], []
    for r in range(plan.num_ranks):
        rp = plan.rank_plan(r, config)
        peers = source != "table"
        if halo_gather:
            rp = rp.halo_gather
            plan_list, params = rp.op_args("cpu")
        else:
            plan_list, params = rp.op_args("cpu", peers=peers, transposed=False)
        s = _step(plan_list)
        values = dict(op="aggregate", deterministic=deterministic, **_step_values(rp, s, params, x, seed))
        if trace:
            values["trace"] = 1
        if counters:
            values["counters"] = 1
        arrays = {
            k: s[k]
            for k in (
                "local_rowptr",
                "local_col",
                "local_weight",
                "remote_rowptr",
                "remote_col",
                "remote_weight",
                "ranges",
                "fixups",
            )
        }
        if table_offset:
            values["table_offset"] = table_offset * x.element_size()
        if peers:
            values.update(_pe_values(source, completion, r, plan.num_ranks, heap_bytes))
            arrays.update(heaps, remote_pe=s["remote_pe"])
        else:
            values["source"] = "table"
            halo = x[torch.from_numpy(rp.shard.halo_nodes)].contiguous()
            arrays.update(table=_after(table_offset, own[r]), remote_table=_after(table_offset, halo))
        folders.append(emulator.write_case(folder / f"rank{r}", values, arrays))
        shapes.append((rp.num_rows, x.size(1)))
    _run(folders)
    return torch.cat([_output(f, "out", shape, x.dtype) for f, shape in zip(folders, shapes, strict=True)])


def _after(offset: int, t: torch.Tensor) -> torch.Tensor:
    """t's elements after `offset` zeros (a table that starts `offset` elements into its array)."""
    return torch.cat([torch.zeros(offset, dtype=t.dtype), t.flatten()]) if offset else t


def aggregate_extreme(
    folder: Path, plan: Plan, x: torch.Tensor, config: Config, reduce: str, seed: int = 0, counters: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Max or min over every rank of `plan` by the emulated kernel of kernels/extreme_kernel.cuh
    (the runner, under ASan/UBSan), remote rows from each rank's halo table, scheduled by `seed`:
    per rank (out, arg), arg indexing that rank's [own rows | halo rows]. counters: as aggregate's."""
    b = plan.bounds
    folders, shapes = [], []
    for r in range(plan.num_ranks):
        rp = plan.rank_plan(r, config)
        plan_list, params = rp.op_args("cpu", transposed=False)
        s = _step(plan_list)
        own = x[int(b[r]) : int(b[r + 1])].contiguous()
        values = dict(
            op="aggregate_extreme",
            reduce=reduce,
            remote_base=own.size(0),
            source="table",
            **_step_values(rp, s, params, x, seed),
        )
        if counters:
            values["counters"] = 1
        arrays = {k: s[k] for k in ("local_rowptr", "local_col", "remote_rowptr", "remote_col", "ranges", "fixups")}
        arrays.update(table=own, remote_table=x[torch.from_numpy(rp.shard.halo_nodes)].contiguous())
        folders.append(emulator.write_case(folder / f"rank{r}", values, arrays))
        shapes.append((rp.num_rows, x.size(1)))
    _run(folders)
    found = []
    for f, shape in zip(folders, shapes, strict=True):
        out = _output(f, "out", shape, x.dtype)
        arg = torch.empty(shape, dtype=torch.int64)
        if out.numel():
            arg = torch.from_numpy(np.fromfile(f / "arg.bin", dtype=np.int64)).reshape(shape)
        found.append((out, arg))
    return found


def _run(folders: list) -> None:
    for f, st in zip(folders, emulator.run_cases(folders), strict=True):
        assert st == "ok", f"{f.name}: {st}"


def _output(folder: Path, name: str, shape, dtype: torch.dtype) -> torch.Tensor:
    """An output of a case; every element written (outputs start as NaN and inputs are finite,
    so a NaN is an element no thread wrote, or a read of poisoned memory)."""
    if shape[0] * shape[1] == 0:
        return torch.empty(shape, dtype=dtype)
    t = emulator.read(folder, name, shape, dtype)
    bad = torch.isnan(t)
    if bool(bad.any()):
        r, c = (int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{folder.name}: {name}[{r}, {c}] is NaN; {int(bad.sum())} elements NaN (never "
            "written, or computed from poisoned memory)"
        )
    return t


# ---- attention ------------------------------------------------------------------------------

SLOPE = 0.2
FETCH_DIRECT = 0  # the CPU reference reads peers directly (the kernels' sources do not change the math)


def _degrees(rowptrs: list) -> torch.Tensor:
    d = 0
    for rp in rowptrs:
        if rp is not None:
            d = d + (rp[1:] - rp[:-1])
    return torch.as_tensor(d).double()


def _attention_values(pass_, dtype, rows, heads, channels, wpb, dropout, seed, ids) -> dict:
    return dict(
        op="attention",
        **{"pass": pass_},
        storage=emulator.STORAGE[dtype],
        rows=rows,
        heads=heads,
        channels=channels,
        wpb=wpb,
        slope=SLOPE,
        dropout=dropout,
        drop_seed=7,
        seed=seed,
        **ids,
    )


def attention(
    folder: Path,
    plan: Plan,
    plan_t: Plan,
    h: torch.Tensor,
    a_src: torch.Tensor,
    a_dst: torch.Tensor,
    grad: torch.Tensor,
    config: Config,
    source: str = "table",
    completion: str = "loadstore",
    dropout: float = 0.0,
    seed: int = 0,
) -> list:
    """GAT's attention over every rank of `plan` by the emulated kernels: the forward pass, d a_dst
    (pass A) and the source rows' gradient (pass B: over the transposed step for the table source,
    over `plan_t`, the transposed graph's plan, for the peer sources), beside the CPU executor's
    float64 results for the same plan lists. Returns (name, emulated, reference, row degrees)."""
    heads, channels = h.size(1), h.size(2)
    table = torch.cat([h, a_src.unsqueeze(-1)], -1).reshape(h.size(0), -1).contiguous()
    b = plan.bounds
    offsets = [int(v) for v in b]  # each PE's first global id, and the end
    own = [table[int(b[r]) : int(b[r + 1])] for r in range(plan.num_ranks)]
    rng = [(int(b[r]), int(b[r + 1])) for r in range(plan.num_ranks)]
    f64 = lambda t: t.double()  # noqa: E731
    common = (heads, SLOPE, dropout, 7)
    peers = source != "table"
    cases, results = [], []
    if peers:
        heaps, heap_bytes = _peer_tables(own)
        fwd = []
        for r, (lo, hi) in enumerate(rng):
            args, params = plan.rank_plan(r, config).op_args("cpu", peers=True, transposed=False)
            out, stats = ops.attend_peers(
                [f64(t) for t in own], r, f64(a_dst[lo:hi]), args, params, *common, offsets, FETCH_DIRECT
            )
            fwd.append((args, params, out, stats))
        terms = [
            ops.attention_terms(f64(grad[lo:hi]), out, f64(a_dst[lo:hi]), stats, heads)
            for (lo, hi), (_, _, out, stats) in zip(rng, fwd, strict=True)
        ]
        term_heaps, term_bytes = _peer_tables([t.float() for t in terms])
        for r, (lo, hi) in enumerate(rng):
            args, params, out, stats = fwd[r]
            s = _step(args)
            ids = dict(ids_rows=lo, ids_local=lo, ids_remote=0, by_pe=1)
            pe = dict(pe_base=torch.tensor(offsets[:-1], dtype=torch.int64))
            part = {k: s[k] for k in ("local_rowptr", "local_col", "remote_rowptr", "remote_col", "remote_pe")}
            deg = _degrees([s["local_rowptr"], s["remote_rowptr"]])
            vals = _pe_values(source, completion, r, plan.num_ranks, heap_bytes)
            d_dst = ops.attend_peers_dst(
                [f64(t) for t in own], r, terms[r], args, params, *common, offsets, FETCH_DIRECT
            )
            cases.append(
                (
                    _attention_values("fwd", h.dtype, hi - lo, heads, channels, params[2], dropout, seed, ids) | vals,
                    part | heaps | pe | dict(a_dst=a_dst[lo:hi]),
                )
            )
            results.append(
                [
                    ("out", (hi - lo, heads * channels), h.dtype, out, deg),
                    ("stats", (hi - lo, 2 * heads), torch.float32, stats, deg),
                ]
            )
            cases.append(
                (
                    _attention_values("dst", h.dtype, hi - lo, heads, channels, params[2], dropout, seed, ids) | vals,
                    part | heaps | pe | dict(terms=terms[r].float()),
                )
            )
            results.append([("d_dst", (hi - lo, heads), h.dtype, d_dst, deg)])
            args_t, params_t = plan_t.rank_plan(r, config).op_args("cpu", peers=True, transposed=False)
            st = _step(args_t)
            grad_ref = ops.attend_peers_src(f64(own[r]), terms, r, args_t, params_t, *common, offsets, FETCH_DIRECT)
            part_t = {k: st[k] for k in ("local_rowptr", "local_col", "remote_rowptr", "remote_col", "remote_pe")}
            vals_t = _pe_values(source, completion, r, plan.num_ranks, term_bytes)
            cases.append(
                (
                    _attention_values("src", h.dtype, hi - lo, heads, channels, params_t[2], dropout, seed, ids)
                    | vals_t,
                    part_t | term_heaps | pe | dict(own=own[r]),
                )
            )
            results.append(
                [("grad", tuple(own[r].shape), h.dtype, grad_ref, _degrees([st["local_rowptr"], st["remote_rowptr"]]))]
            )
    else:
        for r, (lo, hi) in enumerate(rng):
            rp = plan.rank_plan(r, config)
            args, params = rp.op_args("cpu", peers=False, transposed=True)
            remote = table[torch.from_numpy(rp.shard.halo_nodes)].contiguous()
            x, xr, ad, g = f64(own[r]), f64(remote), f64(a_dst[lo:hi]), f64(grad[lo:hi])
            out, stats = ops.attend(x, xr, ad, args, params, *common, None, lo)
            terms = ops.attention_terms(g, out, ad, stats, heads)
            d_x, d_xr, d_dst = ops.attend_backward(g, x, xr, ad, out, stats, args, params, *common, None, lo)
            s, st = _step(args[: len(F)]), _step(args[len(F) :])
            part = {k: s[k] for k in ("local_rowptr", "local_col", "remote_rowptr", "remote_col")}
            deg = _degrees([s["local_rowptr"], s["remote_rowptr"]])
            ids = dict(ids_rows=lo, ids_local=0, ids_remote=hi - lo, by_pe=0, source="table")
            tables = dict(table=own[r], remote_table=remote)
            cases.append(
                (
                    _attention_values("fwd", h.dtype, hi - lo, heads, channels, params[2], dropout, seed, ids),
                    part | tables | dict(a_dst=a_dst[lo:hi]),
                )
            )
            results.append(
                [
                    ("out", (hi - lo, heads * channels), h.dtype, out, deg),
                    ("stats", (hi - lo, 2 * heads), torch.float32, stats, deg),
                ]
            )
            cases.append(
                (
                    _attention_values("dst", h.dtype, hi - lo, heads, channels, params[2], dropout, seed, ids),
                    part | tables | dict(terms=terms.float()),
                )
            )
            results.append([("d_dst", (hi - lo, heads), h.dtype, d_dst, deg)])
            rows_t = hi - lo + remote.size(0)
            ids_t = dict(ids_rows=0, ids_local=lo, ids_remote=lo, by_pe=0, source="table")
            cases.append(
                (
                    _attention_values("src", h.dtype, rows_t, heads, channels, params[8], dropout, seed, ids_t),
                    dict(
                        local_rowptr=st["local_rowptr"],
                        local_col=st["local_col"],
                        terms=terms.float(),
                        own=torch.cat([own[r], remote]),
                    ),
                )
            )
            results.append(
                [("grad", (rows_t, table.size(1)), h.dtype, torch.cat([d_x, d_xr]), _degrees([st["local_rowptr"]]))]
            )
    folders = [emulator.write_case(folder / f"case{i}", v, a) for i, (v, a) in enumerate(cases)]
    _run(folders)
    found = []
    for f, res in zip(folders, results, strict=True):
        for name, shape, dtype, ref, deg in res:
            found.append((f"{f.name}:{name}", _output(f, name, shape, dtype), ref, deg))
    return found

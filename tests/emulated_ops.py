"""The mgg ops' CUDA kernels run by the SIMT emulator on real mgg plans (tests/emulator.py):
each rank's step written as a runner case the way the op files fill kernels::Step and
kernels::Attention, every rank of a Plan run in one runner process, the outputs returned as
tensors in the order of the graph's rows."""
from __future__ import annotations

from pathlib import Path

import torch

import emulator
from mgg import Config, Plan
from mgg.plan import STEP_FIELDS

F = {name: i for i, name in enumerate(STEP_FIELDS)}
SOURCES = ["table", "direct", "get-thread", "get-warp", "get-block"]  # table: halo buffer (or none: one rank)


def _step(plan_list: list) -> dict:
    """The forward step's tensors by field name (weights as fp32, as the CUDA op passes them)."""
    s = {name: plan_list[i] for name, i in F.items()}
    for w in ("local_weight", "remote_weight"):
        if s[w] is not None:
            s[w] = s[w].float()
    return s


def _peer_tables(tables: list) -> tuple[dict, int]:
    """Each PE's table in a symmetric heap of the largest table's size (NaN past its rows)."""
    rows = max(t.size(0) for t in tables)
    heaps = {}
    for pe, t in enumerate(tables):
        h = torch.full((rows, t.size(1)), float("nan"), dtype=t.dtype)
        h[:t.size(0)] = t
        heaps[f"peer{pe}"] = h
    return heaps, rows * tables[0].size(1) * tables[0].element_size()


def _pe_values(source: str, completion: str, rank: int, n: int, heap_bytes: int) -> dict:
    return dict(source=source, completion=completion, my_pe=rank, n_pes=n, heap_bytes=heap_bytes)


def aggregate(folder: Path, plan: Plan, x: torch.Tensor, config: Config, source: str = "table",
              completion: str = "loadstore", deterministic: bool = False, seed: int = 0,
              trace: bool = False) -> torch.Tensor:
    """A @ x over every rank of `plan`, each rank's step by the emulated kernels reading remote
    rows from `source` (gets completed as `completion` says: loadstore or proxy), scheduled by
    `seed`; the rows of all ranks in graph order. trace: each rank's folder keeps the
    emulator's trace of warp and block calls (trace.txt)."""
    b = plan.bounds
    own = [x[int(b[r]):int(b[r + 1])].contiguous() for r in range(plan.num_ranks)]
    heaps, heap_bytes = _peer_tables(own)
    folders, shapes = [], []
    for r in range(plan.num_ranks):
        rp = plan.rank_plan(r, config)
        peers = source != "table"
        plan_list, params = rp.op_args("cpu", peers=peers, transposed=False)
        s = _step(plan_list)
        ps, dist, wpb, interleave, num_slots, max_remote_part = params[:6]
        values = dict(op="aggregate", storage=emulator.STORAGE[x.dtype], deterministic=deterministic, seed=seed,
                      dim=x.size(1), rows=rp.num_rows, num_blocks=s["blocks"].size(0), num_fixups=s["fixups"].size(0),
                      ps=ps, dist=dist, wpb=wpb, interleave=interleave, num_slots=num_slots,
                      max_remote_part=max_remote_part)
        if trace:
            values["trace"] = 1
        arrays = {k: s[k] for k in ("local_rowptr", "local_col", "local_weight", "remote_rowptr", "remote_col",
                                    "remote_weight", "blocks", "fixups")}
        if peers:
            values.update(_pe_values(source, completion, r, plan.num_ranks, heap_bytes))
            arrays.update(heaps, remote_pe=s["remote_pe"])
        else:
            values["source"] = "table"
            arrays.update(table=own[r], remote_table=x[torch.from_numpy(rp.partition.halo_nodes)].contiguous())
        folders.append(emulator.write_case(folder / f"rank{r}", values, arrays))
        shapes.append((rp.num_rows, x.size(1)))
    status = emulator.run_cases(folders)
    for f, st in zip(folders, status, strict=True):
        assert st == "ok", f"{f.name}: {st}"
    return torch.cat([emulator.read(f, "out", shape, x.dtype) if shape[0] * shape[1] else x.new_empty(shape)
                      for f, shape in zip(folders, shapes, strict=True)])

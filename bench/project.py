"""Projects mgg's aggregation time on a node of N GPUs joined by NVLink (a DGX of 8) from what
one GPU measured: python -m bench.project SCALING_CSV --graph G --dim D [--gpus 8] [--nvlink-gbps 450]

The model, fitted on the `scaling` suite's in-process runs (all PEs on one GPU, one after the
other, peers read in place: impl mgg-peers-inproc):

    T(P) = sum over ranks r of ( t0 + c_local * L_r + c_remote * R_r )

with L_r, R_r rank r's local and remote edges (the CSV's rank_edges). A least-squares fit over
the measured P gives t0 (per-rank launch cost), c_local and c_remote (seconds per edge at this
D; on one GPU remote rows come from the same HBM, so c_remote - c_local is the cost of the
remote path itself). On N GPUs the ranks run at once, and a remote row crosses NVLink:

    per remote edge   c_nv = max(c_remote, D * elem / (eta * B_nvlink))
    no overlap        T_r = t0 + c_local * L_r + c_nv * R_r
    full overlap      T_r = t0 + max(c_local * L_r, c_nv * R_r)       (MGG's interleaving at best)
    T(N) = max over r of T_r, with L_r, R_r from the plan of the graph over N ranks.

B_nvlink is the per-GPU NVLink bandwidth in one direction (H100 SXM, NVLink 4: 450 GB/s); eta
the fraction of it that fine-grained row gets reach (an assumption: 0.7 by default). The two
bounds bracket the expected time; the output states every input.
"""

from __future__ import annotations

import argparse
import csv
import sys

import numpy as np
from scipy.optimize import nnls

from mgg import Plan
from mgg.data import load_graph
from mgg.runtime.hardware import H100_SXM

from .suites.common import parse_rank_edges


def fit(rows: list[dict]) -> tuple[float, float, float]:
    """(t0, c_local, c_remote) in seconds from scaling rows of one graph and D.

    A non-negative least-squares fit: a cost per rank or per edge is never negative, and a noisy
    timing that an unconstrained fit would answer with a negative coefficient would let the
    full-overlap bound exceed the no-overlap one."""
    a, b = [], []
    for r in rows:
        edges = parse_rank_edges(r["rank_edges"])
        a.append([len(edges), sum(e[0] for e in edges), sum(e[1] for e in edges)])
        b.append(float(r["median_ms"]) * 1e-3)
    a, b = np.asarray(a, float), np.asarray(b, float)
    if np.linalg.matrix_rank(a) < 3:  # too few distinct P: no separate launch cost
        coef, _ = nnls(a[:, 1:], b)
        return 0.0, float(coef[0]), float(coef[1])
    scale = a.max(axis=0)  # columns of counts (ranks vs edges) differ by 1e4: solve in unit columns
    coef, _ = nnls(a / scale, b)
    coef = coef / scale
    return float(coef[0]), float(coef[1]), float(coef[2])


def project(
    rows: list[dict], graph_spec: str, dim: int, gpus: int, nvlink_gbps: float, eta: float, elem: int = 4, data_dir=None
) -> dict:
    sel = [
        r
        for r in rows
        if r["suite"] == "scaling"
        and r["impl"] == "mgg-peers-inproc"
        and r["graph"] == graph_spec
        and int(r["dim"]) == dim
    ]
    if len({int(r["pes"]) for r in sel}) < 2:
        raise SystemExit(
            f"bench.project: need scaling rows (mgg-peers-inproc) of {graph_spec} at D={dim} "
            f"for at least two PE counts; found {len(sel)}"
        )
    t0, c_local, c_remote = fit(sel)
    c_nv = max(c_remote, dim * elem / (eta * nvlink_gbps * 1e9))
    stats = Plan(load_graph(graph_spec, data_dir), gpus).stats()
    no_overlap = max(t0 + c_local * s["local_edges"] + c_nv * s["remote_edges"] for s in stats)
    overlap = max(t0 + max(c_local * s["local_edges"], c_nv * s["remote_edges"]) for s in stats)
    one = next((float(r["median_ms"]) * 1e-3 for r in sel if int(r["pes"]) == 1), None)
    device = " / ".join(sorted({r.get("device") or "an unrecorded device" for r in sel}))
    return dict(
        graph=graph_spec,
        dim=dim,
        gpus=gpus,
        device=device,
        nvlink_gbps=nvlink_gbps,
        eta=eta,
        t0_us=t0 * 1e6,
        c_local_ns=c_local * 1e9,
        c_remote_ns=c_remote * 1e9,
        c_nvlink_ns=c_nv * 1e9,
        remote_fraction=sum(s["remote_edges"] for s in stats) / max(1, sum(s["edges"] for s in stats)),
        one_pe_ms=None if one is None else one * 1e3,
        no_overlap_ms=no_overlap * 1e3,
        overlap_ms=overlap * 1e3,
        measured_pes=sorted({int(r["pes"]) for r in sel}),
    )


def markdown(p: dict) -> str:
    """The projection as markdown; the base row names the device that measured it (the scaling
    rows' device column), and a CPU's measurement is said to be one."""
    speed = (lambda t: f"{p['one_pe_ms'] / t:.2f}x") if p["one_pe_ms"] else (lambda t: "n/a")
    device = p["device"]
    cpu = (
        [
            f"Measured on a CPU: the fitted costs are the CPU's, so the {p['gpus']} GPU rows below only "
            "exercise the model, they project no GPU.",
            "",
        ]
        if device.startswith("cpu")
        else []
    )
    return "\n".join(
        [
            f"## Projection: {p['graph']}, D={p['dim']}, {p['gpus']} GPUs over NVLink",
            "",
            *cpu,
            f"Fitted on {device} from the scaling suite at P = {p['measured_pes']}: t0 = {p['t0_us']:.1f} us per rank, "
            f"c_local = {p['c_local_ns']:.3f} ns and c_remote = {p['c_remote_ns']:.3f} ns per edge. NVLink "
            f"{p['nvlink_gbps']:.0f} GB/s per direction at eta = {p['eta']:.2f} gives {p['c_nvlink_ns']:.3f} ns per "
            f"remote edge. Remote edges over {p['gpus']} ranks: {p['remote_fraction'] * 100:.1f}%.",
            "",
            "| case | aggregation ms | speedup over the measured 1 PE |",
            "| --- | --- | --- |",
            f"| 1 PE on {device} (measured) | {p['one_pe_ms'] or float('nan'):.3f} | 1.00x |",
            f"| {p['gpus']} GPUs, no overlap | {p['no_overlap_ms']:.3f} | {speed(p['no_overlap_ms'])} |",
            f"| {p['gpus']} GPUs, full overlap | {p['overlap_ms']:.3f} | {speed(p['overlap_ms'])} |",
            "",
        ]
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.project", description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="a CSV with scaling-suite rows (python -m bench scaling ...)")
    ap.add_argument("--graph", required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--nvlink-gbps", type=float, default=H100_SXM.nvlink_bytes_per_s / 1e9)
    ap.add_argument("--eta", type=float, default=0.7)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(args.csv)))
    p = project(rows, args.graph, args.dim, args.gpus, args.nvlink_gbps, args.eta, data_dir=args.data_dir)
    print(markdown(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())

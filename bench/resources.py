"""What the compiler gives each kernel: registers, spills, stack and static shared memory per
kernel instantiation and arch, read from ptxas (-Xptxas -v) while compiling csrc/kernels/*.cu
with the extension's own flags (csrc/build_flags.json) and the NVSHMEM wheel's headers, so the
NVSHMEM-get variants are in it (bench.cubins); and, from the same sm_90 cubins, the row loads in
flight per kernel (bench.sass). Needs nvcc, not a GPU.

    python -m bench.resources [--archs 80 90] [--out DIR] [--check]

Writes resources-<date>.csv (one row per kernel and arch; the columns that Nsight Compute also
reports carry its metric names) and prints a markdown table. --check exits 1 when any kernel on
any arch spills (none does since 2026-11-26, nvcc 13.0, NVSHMEM 3.4.5: issue 31), and when an
aggregation range kernel of any source but the proxy path's NVSHMEM gets (whose launch bounds
allow more: kernels/aggregate_kernel.cuh's kBoundThreads) holds more registers per thread on an
arch than REGISTER_BOUND gives (64 on sm_90: two 16-warp blocks per SM), and, where sm_90 is
compiled, when bench.sass's check fails (an aggregation range kernel
with fewer 16-byte row loads in flight than kRowsInFlight, or none to check). With --out, the
SASS rows go to sass-<date>.csv beside.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import sys
import tempfile
from pathlib import Path

from bench import cubins, sass
from bench.cubins import short_name
from mgg.runtime.kernel_model import RANGE_KERNEL

COLUMNS = [
    "source",
    "arch",
    "kernel",
    "launch__registers_per_thread",
    "spill_store_bytes",
    "spill_load_bytes",
    "stack_frame_bytes",
    "launch__shared_mem_per_block_static",
    "barriers",
]

# arch -> the most registers per thread an aggregation range kernel may hold there:
# kernels/aggregate_kernel.cuh's kBlockRegisters (kBlocksPerSm blocks of 512 threads per SM), which
# the kernel model assumes (RANGE_KERNEL.regs, written there once).
REGISTER_BOUND = {"90": RANGE_KERNEL.regs}


def bounded(row: dict) -> bool:
    """An aggregation range kernel, whatever its source but the proxy path's NVSHMEM gets."""
    return row["kernel"].startswith("aggregate_ranges_kernel") and "NvshmemGetFetch" not in row["kernel"]


def register_violations(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        bound = REGISTER_BOUND.get(str(r["arch"]))
        if bound is not None and bounded(r) and r["launch__registers_per_thread"] > bound:
            out.append(
                f"{key(r)} ({r.get('source', 'ptxas')}): {r['launch__registers_per_thread']} registers, {bound} allowed"
            )
    return out


def key(row: dict) -> str:
    return f"{row['kernel']}@sm_{row['arch']}"


def parse_ptxas(text: str) -> list[dict]:
    """The entry functions of one ptxas -v log with their resources; device functions (NVSHMEM's
    own) are skipped: their frames are part of the kernels that call them."""
    rows, current, entries = [], None, set()
    for line in text.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)' for 'sm_(\d+)'", line):
            entries.add(m.group(1))
            current = dict(kernel=m.group(1), arch=m.group(2))
            rows.append(current)
        elif m := re.search(r"Function properties for (\S+)", line):
            current = next((r for r in rows if r["kernel"] == m.group(1)), None)
        elif (
            m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        ) and current is not None:
            current.update(
                stack_frame_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)), spill_load_bytes=int(m.group(3))
            )
        elif (m := re.search(r"Used (\d+) registers", line)) and rows:
            last = rows[-1]
            last["launch__registers_per_thread"] = int(m.group(1))
            last["barriers"] = int(re.search(r"used (\d+) barriers", line).group(1)) if "barriers" in line else 0
            smem = re.search(r"(\d+) bytes smem", line)
            last["launch__shared_mem_per_block_static"] = int(smem.group(1)) if smem else 0
    for r in rows:
        r["kernel"] = short_name(r["kernel"])
        for k in COLUMNS[3:]:
            r.setdefault(k, 0)
    return rows


def measure(compiled: list[cubins.Cubin]) -> list[dict]:
    """The rows of every kernel of every cubin, from its ptxas log."""
    return [dict(row, source=c.source) for c in compiled for row in parse_ptxas(c.ptxas_log)]


def spills(rows: list[dict]) -> list[str]:
    """Every kernel that spills: stores or loads of local memory for want of registers."""
    out = []
    for r in rows:
        if r["spill_store_bytes"] + r["spill_load_bytes"]:
            out.append(
                f"{key(r)} ({r.get('source', 'ptxas')}): {r['spill_store_bytes']} bytes of spill stores, "
                f"{r['spill_load_bytes']} of loads"
            )
    return out


def markdown(rows: list[dict]) -> str:
    head = "| kernel | arch | registers | spill st/ld bytes | stack | static smem |"
    lines = [head, "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (r["kernel"], r["arch"])):
        lines.append(
            f"| {r['kernel']} | sm_{r['arch']} | {r['launch__registers_per_thread']} | "
            f"{r['spill_store_bytes']}/{r['spill_load_bytes']} | {r['stack_frame_bytes']} | "
            f"{r['launch__shared_mem_per_block_static']} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.resources", description=__doc__.splitlines()[0])
    ap.add_argument("--archs", nargs="+", default=["80", "90"], help="SM versions (default 80 90)")
    ap.add_argument("--out", default=None, help="folder for the CSV (default: none written)")
    ap.add_argument(
        "--check",
        action="store_true",
        help="exit 1 on any spill, on an aggregation range kernel over REGISTER_BOUND, or (sm_90) on an "
        "aggregation range kernel with too few row loads in flight (bench.sass)",
    )
    args = ap.parse_args(argv)
    nvcc = cubins.find_nvcc()
    if nvcc is None:
        print("bench.resources: no nvcc here (CUDA_HOME, /usr/local/cuda, PATH): nothing to measure")
        return 0
    loads = None  # bench.sass's rows: the loads in flight of the sm_90 code, read from the same cubins
    cuobjdump = sass.find_cuobjdump(nvcc)
    with tempfile.TemporaryDirectory() as tmp:
        compiled = cubins.compile_kernels(nvcc, args.archs, Path(tmp))
        rows = measure(compiled)
        if sass.ARCH in args.archs and cuobjdump is not None:
            loads = sass.measure(cuobjdump, compiled)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"resources-{datetime.date.today().isoformat()}.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows({k: r[k] for k in COLUMNS} for r in rows)
        print(f"bench.resources: {len(rows)} kernels written to {path}", file=sys.stderr)
        if loads is not None:
            print(f"bench.sass: {len(loads)} kernels written to {sass.write_csv(loads, args.out)}", file=sys.stderr)
    print(markdown(rows))
    if loads is not None:
        print(f"\nLoads in flight (sm_{sass.ARCH} SASS, bench.sass):\n\n{sass.markdown(loads)}")
    if not args.check:
        return 0
    bad = spills(rows)
    for v in bad:
        print(f"bench.resources: spill: {v}", file=sys.stderr)
    over = register_violations(rows)
    for v in over:
        print(f"bench.resources: registers: {v}", file=sys.stderr)
    if not (bad or over):
        bounded_rows = [r for r in rows if bounded(r) and str(r["arch"]) in REGISTER_BOUND]
        print(
            f"bench.resources: no kernel spills ({len(rows)} kernel/arch pairs); {len(bounded_rows)} range kernels "
            f"within REGISTER_BOUND"
        )
    if sass.ARCH not in args.archs:
        shallow = 0  # no sm_90 code compiled: nothing for the SASS check to read
    elif loads is None:
        print("bench.sass: no cuobjdump (beside nvcc, on PATH, or triton's): no SASS to check", file=sys.stderr)
        shallow = 1
    else:
        shallow = sass.check(loads)
    return 1 if bad or over or shallow else 0


if __name__ == "__main__":
    sys.exit(main())

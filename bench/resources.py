"""What the compiler gives each kernel: registers, spills, stack and static shared memory per
kernel instantiation and arch, read from ptxas (-Xptxas -v) while compiling csrc/kernels/*.cu
with the extension's own flags (csrc/build_flags.json) and the NVSHMEM wheel's headers, so the
NVSHMEM-get variants are in it. Needs nvcc, not a GPU.

    python -m bench.resources [--archs 80 90] [--out DIR] [--check]

Writes resources-<date>.csv (one row per kernel and arch; the columns that Nsight Compute also
reports carry its metric names) and prints a markdown table. --check exits 1 when any kernel on
any arch spills (none does since 2026-11-26, nvcc 13.0, NVSHMEM 3.4.5: issue 31), and when an
aggregation blocks kernel, of any source (the proxy path's fetch-warp kernel included), holds
more registers per thread on an arch than REGISTER_BOUND gives (64 on sm_90: two 16-warp blocks
per SM).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "csrc" / "kernels"
FLAGS = json.loads((ROOT / "csrc" / "build_flags.json").read_text())
DEFINES = ["-DMGG_WITH_CUDA", "-DMGG_WITH_NVSHMEM"]  # as setup.py builds the CUDA extension
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

# arch -> the most registers per thread an aggregation blocks kernel may hold there:
# kernels/aggregate_kernel.cuh's kBlockRegisters (kBlocksPerSm blocks of 512 threads per SM).
REGISTER_BOUND = {"90": 64}


def bounded(row: dict) -> bool:
    """An aggregation blocks kernel (aggregate_blocks_kernel, aggregate_blocks_blockget_kernel,
    aggregate_blocks_fetchwarp_kernel), whatever its sources."""
    return row["kernel"].startswith("aggregate_blocks")


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


def find_nvcc() -> str | None:
    """nvcc where setup.py looks for it: CUDA_HOME, else CUDA_PATH; /usr/local/cuda; PATH."""
    for d in (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if d and os.access(os.path.join(d, "bin", "nvcc"), os.X_OK):
            return os.path.join(d, "bin", "nvcc")
    return shutil.which("nvcc")


def nvshmem_include() -> Path:
    spec = importlib.util.find_spec("nvidia.nvshmem")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "bench.resources: the NVSHMEM wheel is not installed (pip install nvidia-nvshmem-cu13): "
            "without its headers the NVSHMEM-get kernels, the ones that spill, are not compiled"
        )
    return Path(spec.submodule_search_locations[0]) / "include"


def compile_flags(arch: str) -> list[str]:
    return (
        FLAGS["nvcc"]
        + DEFINES
        + [f"-U{m}" for m in FLAGS["nvcc_undefine"]]
        + [f"-I{nvshmem_include()}", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-Xptxas", "-v"]
    )


def demangle(names: list[str]) -> list[str]:
    if not names or shutil.which("c++filt") is None:
        return names
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def short_name(name: str) -> str:
    """A demangled kernel without namespaces, argument list or enum casts:
    aggregate_blocks_kernel<float, TableFetch, NvshmemGetFetch<1>>."""
    name = re.sub(r"^__nv_static_\w+?_(?=_Z)", "", name)  # nvcc's prefix of internal-linkage kernels
    if name.startswith("_Z"):
        name = demangle([name])[0]
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\([^()]*(\([^()]*\)[^()]*)*\)$", "", name)  # the argument list
    name = re.sub(r"(mgg::kernels::|\(anonymous namespace\)::|mgg::)", "", name)
    name = re.sub(r"\(\w+\)(\d+)", r"\1", name)  # (GetScope)1 -> 1
    return name.replace("> >", ">>").replace(" >", ">")


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


def measure(nvcc: str, archs: list[str], log=print) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for source in sorted(KERNELS.glob("*.cu")):
            for arch in archs:
                log(f"bench.resources: {source.name} for sm_{arch}", file=sys.stderr)
                cmd = [nvcc, "-cubin", "-o", os.path.join(tmp, "k.cubin"), *compile_flags(arch), str(source)]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"bench.resources: nvcc failed on {source.name} (sm_{arch}):\n{r.stderr[-3000:]}")
                for row in parse_ptxas(r.stderr):
                    rows.append(dict(row, source=source.name))
    return rows


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
        help="exit 1 on any spill or on an aggregation blocks kernel over REGISTER_BOUND",
    )
    args = ap.parse_args(argv)
    nvcc = find_nvcc()
    if nvcc is None:
        print("bench.resources: no nvcc here (CUDA_HOME, /usr/local/cuda, PATH): nothing to measure")
        return 0
    rows = measure(nvcc, args.archs)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"resources-{datetime.date.today().isoformat()}.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows({k: r[k] for k in COLUMNS} for r in rows)
        print(f"bench.resources: {len(rows)} kernels written to {path}", file=sys.stderr)
    print(markdown(rows))
    if args.check:
        bad = spills(rows)
        for v in bad:
            print(f"bench.resources: spill: {v}", file=sys.stderr)
        over = register_violations(rows)
        for v in over:
            print(f"bench.resources: registers: {v}", file=sys.stderr)
        if bad or over:
            return 1
        bounded_rows = [r for r in rows if bounded(r) and str(r["arch"]) in REGISTER_BOUND]
        print(
            f"bench.resources: no kernel spills ({len(rows)} kernel/arch pairs); {len(bounded_rows)} blocks kernels "
            f"within REGISTER_BOUND"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

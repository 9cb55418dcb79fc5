"""Rows in flight, read from the SASS: how many 16-byte global loads (LDG.E.128) each kernel issues
before it touches the registers of the first of them, in the sm_90 code of csrc/kernels/*.cu
compiled as the extension compiles them (bench.cubins) and disassembled by cuobjdump -sass. The
emulator cannot see this (it runs the source in order); ptxas decides it. Needs nvcc and cuobjdump
(the toolkit's, or the copy triton ships), not a GPU.

    python -m bench.sass [FILE.cubin | FILE.sass ...] [--out DIR] [--check]

Per kernel instantiation: the LDG.E.128 count, the deepest window of them (a run of 128-bit
global loads none of whose destination registers, R4..R7 for `LDG.E.128 R4`, is read or written
before the last of them issues, along any path of the code: predicated instructions count as
executed, both ways of a conditional branch are followed, a divergence branch (BRA.DIV,
WARPSYNC.COLLECTIVE) as not taken; a call, return, barrier or scoreboard wait ends it) and, in
fp16/bf16 kernels, the narrow row loads: 64-bit or 16-bit global loads whose value is first used,
past the unpacking of fp16/bf16 halves, by floating-point arithmetic (int64 row ends and range
records are first used by integer code). Writes sass-<date>.csv with --out, and prints a markdown table.

--check exits 1, one line per failing kernel, when an aggregation range kernel (every
aggregate_ranges_kernel instantiation that reads rows on the 16-byte grid) has a window shallower
than csrc/core/limits.h's kRowsInFlight, or, at fp16/bf16, any narrow row load; and when there is
no such kernel at all. Other kernels (the column-per-load range kernels for rows off the grid,
fixup, max/min, attention) are reported, not checked. CI runs it within bench.resources --check,
on the cubins that check compiles.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import cubins

ARCH = "90"  # the H100/H200 code the check holds
CHECKED = "aggregate_ranges_kernel"
# launch.cuh's range_kernel(tile, vec): the third template argument is kVecRows; its `false`
# instantiations read one column per load (rows off the 16-byte grid), so hold no 16-byte loads.
COLUMN_LOADS = re.compile(rf"^{CHECKED}<[^,<>]+, \d+, false,")
HALF = ("__half", "__nv_bfloat16")
COLUMNS = ["source", "arch", "kernel", "ldg128_loads", "ldg128_in_flight", "narrow_row_loads"]
LIMITS_H = cubins.ROOT / "csrc" / "core" / "limits.h"

# Opcodes (the part before the first dot) whose leading register operand is read, not written.
NO_DEST = {"ST", "STG", "STS", "STL", "RED", "LDGSTS", "WARPSYNC", "BRA", "BRX", "JMX", "CALL", "RET", "EXIT",
           "BSSY", "BSYNC", "BREAK", "BAR", "MEMBAR", "DEPBAR", "CCTL", "NOP"}  # fmt: skip
PREDICATE_FIRST = {"SHFL", "ATOM", "ATOMG", "ATOMS"}  # `SHFL.IDX PT, R25, ...`: a predicate out, then the register
LOADS = {"LD", "LDG", "LDS", "LDL", "LDC"}
STORES = {"ST", "STG", "STS", "STL", "RED", "ATOM", "ATOMG", "ATOMS"}
FP64 = {"DADD", "DMUL", "DFMA", "DMNMX", "DSETP"}
# Where a path's window ends whatever it reads: the callee or the wait may drain the loads.
STOPS = {"CALL", "RET", "BRX", "JMX", "BAR", "MEMBAR", "DEPBAR", "ERRBAR", "CGAERRBAR"}
# A narrow load is a row's when its value first meets one of these, past the integer moves that
# unpack bf16 halves into floats (x << 16: SHF, IMAD.U32 x 0x10000, PRMT, LOP3) or copy them.
FLOAT_OPS = {"FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "HADD2", "HFMA2", "HMUL2", "HMNMX2", "HSETP2", "F2F"}
UNPACK = {"PRMT", "SHF", "LOP3", "MOV", "IMAD"}
REGISTER = re.compile(r"(?<![\w.])R(\d+)(\.64)?(?!\w)")
PREDICATE = re.compile(r"^!?U?P(\d|T)$")
LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;")
GUARD = re.compile(r"^(@!?U?P[T\d])\s+")
MAX_STATES = 200_000  # per window's walk: far above what a kernel needs (a walk ends at the first use)


@dataclass(frozen=True)
class Instruction:
    addr: int
    base: str  # the opcode before its first dot: LDG
    guard: str  # "@!P2", or "" when unpredicated
    opcode: str  # LDG.E.128.CONSTANT
    operands: tuple[str, ...]
    reads: int  # registers read, a bit per register (R4.64: R4 and R5)
    writes: int

    @property
    def conditional(self) -> bool:
        return self.guard not in ("", "@PT")


def _bits(first: int, width: int) -> int:
    return ((1 << width) - 1) << first


def _width(opcode: str) -> int:
    """The registers of a memory instruction's data: .128 four, .64 two."""
    parts = opcode.split(".")
    return 4 if "128" in parts else 2 if "64" in parts else 1


def instruction(addr: int, text: str) -> Instruction:
    """One SASS instruction from its text (`@!P2 LDG.E.128 R4, desc[UR38][R4.64]`), with the
    registers it reads and writes."""
    guard = ""
    if m := GUARD.match(text):
        guard, text = m.group(1), text[m.end() :]
    opcode, _, rest = text.partition(" ")
    operands = tuple(o.strip() for o in rest.split(",")) if rest.strip() else ()
    base, parts = opcode.split(".")[0], opcode.split(".")
    dest = None
    if base in PREDICATE_FIRST and operands and PREDICATE.match(operands[0]):
        dest = 1
    elif base not in NO_DEST and operands and re.fullmatch(r"R\d+", operands[0]):
        dest = 0
    reads = writes = 0
    for k, operand in enumerate(operands):
        for m in REGISTER.finditer(operand):
            width = 2 if m.group(2) or base in FP64 else 1
            if k == dest:
                if base in LOADS:
                    width = _width(opcode)
                elif (base == "IMAD" and "WIDE" in parts) or (base == "CS2R" and "32" not in parts):
                    width = 2
                writes |= _bits(int(m.group(1)), width)
            else:
                if base in STORES and "[" not in operand:  # the data stored
                    width = max(width, _width(opcode))
                elif base == "IMAD" and "WIDE" in parts and k == 3:  # the 64-bit addend
                    width = 2
                reads |= _bits(int(m.group(1)), width)
    return Instruction(addr, base, guard, opcode, operands, reads, writes)


def parse(text: str) -> dict[str, list[Instruction]]:
    """cuobjdump -sass output -> its functions (as cuobjdump names them; an excerpt without a
    `Function :` line is one function named "") and their instructions in address order."""
    functions: dict[str, list[Instruction]] = {}
    code = functions.setdefault("", [])
    for line in text.splitlines():
        if m := re.match(r"\s*Function : (\S+)", line):
            code = functions.setdefault(m.group(1), [])
        elif m := LINE.search(line):
            code.append(instruction(int(m.group(1), 16), m.group(2)))
    return {name: code for name, code in functions.items() if code}


def is_ldg128(ins: Instruction) -> bool:
    return ins.base == "LDG" and "128" in ins.opcode.split(".")


def is_narrow_ldg(ins: Instruction) -> bool:
    parts = ins.opcode.split(".")
    return ins.base == "LDG" and ("64" in parts or "U16" in parts or "S16" in parts)


def successors(code: list[Instruction]) -> list[list[int]]:
    """Per instruction, the indices execution may go on at: a conditional branch both ways, a
    divergence branch (BRA.DIV, WARPSYNC.COLLECTIVE: to the slow path of a diverged warp) as not
    taken, none after an unconditional EXIT, a stop (STOPS) or a branch out of the code."""
    at = {ins.addr: k for k, ins in enumerate(code)}
    out = []
    for i, ins in enumerate(code):
        nxt = [i + 1] if i + 1 < len(code) else []
        if ins.base == "EXIT":
            out.append(nxt if ins.conditional else [])
        elif ins.base in STOPS:
            out.append([])
        elif ins.base != "BRA" or "DIV" in ins.opcode.split(".") or ins.guard == "@!PT":
            out.append(nxt)
        else:
            target = re.search(r"0x([0-9a-f]+)$", ins.operands[-1]) if ins.operands else None
            taken = [at[int(target.group(1), 16)]] if target and int(target.group(1), 16) in at else []
            # `@P0 BRA`, or a predicate operand (`BRA.U !UP0, 0x...`): either way
            either = ins.conditional or any(PREDICATE.match(o) for o in ins.operands[:-1])
            out.append(nxt + taken if either else taken)
    return out


def _walk(code: list[Instruction], succ: list[list[int]], start: int, state: int, step) -> None:
    """Depth-first over the paths from code[start] on; step(instruction, state) gives the state to
    carry on with, or None where the path ends. Each (instruction, state) once."""
    stack = [(j, state) for j in succ[start]]
    seen = set()
    while stack and len(seen) < MAX_STATES:
        i, state = stack.pop()
        if (i, state) in seen:
            continue
        seen.add((i, state))
        state = step(code[i], state)
        if state is not None:
            stack.extend((j, state) for j in succ[i])


def window(code: list[Instruction], succ: list[list[int]], start: int) -> int:
    """The most LDG.E.128 issued from code[start] on, along one path, before an instruction reads or
    writes a destination register of any of them (a write must wait for the load too)."""
    deepest = 1

    def step(ins: Instruction, pending: int) -> int | None:
        nonlocal deepest
        if (ins.reads | ins.writes) & pending:
            return None
        if is_ldg128(ins):
            pending |= ins.writes
            deepest = max(deepest, pending.bit_count() // 4)
        return pending

    _walk(code, succ, start, code[start].writes, step)
    return deepest


def feeds_float(code: list[Instruction], succ: list[list[int]], start: int) -> bool:
    """Whether the value code[start] loads is a row's: its first use, past the unpacking of fp16/bf16
    halves (UNPACK), is floating-point arithmetic. An int64 row end or range record is first used
    by integer code (a compare, an add, a shuffle), which ends the walk."""
    found = False

    def step(ins: Instruction, carried: int) -> int | None:
        nonlocal found
        if ins.reads & carried:
            if ins.base in FLOAT_OPS:
                found = True
            return (carried | ins.writes) if ins.base in UNPACK else None
        if not ins.conditional:
            carried &= ~ins.writes
        return carried or None

    _walk(code, succ, start, code[start].writes, step)
    return found


def scalar_type(kernel: str) -> str:
    m = re.match(r"[^<]*<([^,<>]+)", kernel)
    return m.group(1).strip() if m else ""


def measure_code(kernel: str, code: list[Instruction]) -> dict:
    succ = successors(code)
    wide = [k for k, ins in enumerate(code) if is_ldg128(ins)]
    row = dict(
        kernel=kernel,
        ldg128_loads=len(wide),
        ldg128_in_flight=max((window(code, succ, k) for k in wide), default=0),
        narrow_row_loads="",
    )
    if scalar_type(kernel) in HALF:
        narrow = [k for k, ins in enumerate(code) if is_narrow_ldg(ins)]
        row["narrow_row_loads"] = sum(feeds_float(code, succ, k) for k in narrow)
    return row


def measure_text(text: str, source: str = "", arch: str = ARCH) -> list[dict]:
    functions = parse(text)
    names = [cubins.short_name(n) for n in cubins.demangle(list(functions))]
    return [
        dict(measure_code(n, code), source=source, arch=arch) for n, code in zip(names, functions.values(), strict=True)
    ]


def find_cuobjdump(nvcc: str | None) -> str | None:
    """Beside nvcc, on PATH, else the copy triton ships (torch's CUDA wheels bring it; an nvcc-only
    toolkit install may lack cuobjdump)."""
    if nvcc and (Path(nvcc).parent / "cuobjdump").exists():
        return str(Path(nvcc).parent / "cuobjdump")
    if found := shutil.which("cuobjdump"):
        return found
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if bundled.exists():
            return str(bundled)
    return None


def disassemble(cuobjdump: str, path: Path) -> str:
    r = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench.sass: cuobjdump failed on {path}:\n{r.stderr[-2000:]}")
    return r.stdout


def measure(cuobjdump: str, compiled: list[cubins.Cubin]) -> list[dict]:
    """The rows of every kernel of the ARCH cubins among compiled."""
    rows = []
    for c in compiled:
        if c.arch == ARCH:
            rows += measure_text(disassemble(cuobjdump, c.path), c.source, c.arch)
    return rows


def rows_in_flight() -> int:
    """csrc/core/limits.h's kRowsInFlight: the 16-byte row loads each lane keeps in flight."""
    m = re.search(r"constexpr int kRowsInFlight = (\d+);", LIMITS_H.read_text())
    if m is None:
        raise SystemExit(f"bench.sass: {LIMITS_H} defines no kRowsInFlight: no depth to check against")
    return int(m.group(1))


def checked(row: dict) -> bool:
    return row["kernel"].startswith(f"{CHECKED}<") and not COLUMN_LOADS.match(row["kernel"])


def violations(rows: list[dict], required: int | None = None) -> list[str]:
    """One line per checked kernel below the rule, or one saying there is none to check."""
    mine = [r for r in rows if checked(r)]
    if not mine:
        found = sorted({r["kernel"].split("<")[0] for r in rows if not r["kernel"].startswith("__")})  # no libdevice
        there = ", ".join(found) or "none"
        return [f"no {CHECKED} found (16-byte row variant) in the sm_{ARCH} SASS; kernels there: {there}"]
    required = rows_in_flight() if required is None else required
    out = []
    for r in mine:
        where = f"{r['kernel']}@sm_{r['arch']} ({r['source'] or 'sass'})"
        if r["ldg128_in_flight"] < required:
            depth = r["ldg128_in_flight"]
            out.append(f"{where}: {depth} LDG.E.128 row loads in flight before first use, {required} required")
        if r["narrow_row_loads"]:
            out.append(f"{where}: {r['narrow_row_loads']} row loads narrower than LDG.E.128 (LDG.E.64/U16)")
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| kernel | source | LDG.E.128 | in flight | narrow row loads |", "| --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (r["kernel"], r["source"])):
        cells = [r[k] for k in ("kernel", "source", "ldg128_loads", "ldg128_in_flight", "narrow_row_loads")]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def write_csv(rows: list[dict], folder: str) -> Path:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"sass-{datetime.date.today().isoformat()}.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows({k: r[k] for k in COLUMNS} for r in rows)
    return path


def check(rows: list[dict]) -> int:
    """--check: 1 with a line per failing kernel on stderr, else 0 with a line of what passed."""
    bad = violations(rows)
    for v in bad:
        print(f"bench.sass: {v}", file=sys.stderr)
    if bad:
        return 1
    print(f"bench.sass: every {CHECKED} ({sum(map(checked, rows))}) keeps {rows_in_flight()} row loads in flight")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sass", description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help=".cubin or cuobjdump -sass files (default: compile csrc/kernels)")
    ap.add_argument("--out", default=None, help="folder for the CSV (default: none written)")
    ap.add_argument("--check", action="store_true", help=f"exit 1 when a {CHECKED} keeps too few rows in flight")
    args = ap.parse_args(argv)
    nvcc = cubins.find_nvcc()
    cuobjdump = find_cuobjdump(nvcc)
    texts = [Path(f) for f in args.files if f.endswith(".sass")]
    binaries = [cubins.Cubin(Path(f).name, ARCH, Path(f), "") for f in args.files if not f.endswith(".sass")]
    if (binaries or not args.files) and cuobjdump is None:
        print("bench.sass: no cuobjdump (beside nvcc, on PATH, or triton's): no SASS to read", file=sys.stderr)
        return 1
    rows = [r for p in texts for r in measure_text(p.read_text(), p.name)]
    if binaries:
        rows += measure(cuobjdump, binaries)
    if not args.files:
        if nvcc is None:
            print("bench.sass: no nvcc here (CUDA_HOME, /usr/local/cuda, PATH): nothing to measure")
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            rows += measure(cuobjdump, cubins.compile_kernels(nvcc, [ARCH], Path(tmp)))
    if args.out:
        print(f"bench.sass: {len(rows)} kernels written to {write_csv(rows, args.out)}", file=sys.stderr)
    print(markdown(rows))
    return check(rows) if args.check else 0


if __name__ == "__main__":
    sys.exit(main())

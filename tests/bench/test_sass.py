"""bench.sass: the row loads in flight read from SASS, on excerpts of real cuobjdump output
(data/sass-*.sass: the gather loops of the performance review's evidence, sm_90, nvcc 13.0: the
blocks kernel of 2026-11-27, one row load at a time, and its K = 4 batched experiment; the bf16
blocks kernel's pairs of 64-bit loads; the head of a whole cuobjdump listing) and on a few
instructions written here where a rule needs one."""

import os

from bench import resources, sass

DATA = os.path.join(os.path.dirname(__file__), "data")
F32_BLOCKS = "aggregate_blocks_kernel<float, TableFetch, TableFetch>"
RANGES = "aggregate_ranges_kernel<float, 1, true, TableFetch, TableFetch, 2>"


def rows_of(name: str) -> list[dict]:
    return sass.measure_text(open(os.path.join(DATA, name)).read(), name)


def code_of(*lines: str) -> list[sass.Instruction]:
    """Instructions, one per argument, at addresses 0x0, 0x10, ... in order."""
    return sass.parse("\n".join(f"/*{16 * k:04x}*/ {t} ;" for k, t in enumerate(lines)))[""]


def depth(*lines: str) -> int:
    return sass.measure_code("k<float>", code_of(*lines))["ldg128_in_flight"]


LDG4, LDG8, LDG12 = (f"LDG.E.128 R{r}, desc[UR4][R2.64]" for r in (4, 8, 12))  # into R4..R7, R8..R11, R12..R15
USE4 = "FFMA R0, R4, R1, R0"


def regs(*numbers: int) -> int:
    return sum(1 << n for n in numbers)


def test_reads_a_cuobjdump_listing_kernel_by_kernel():
    """Function headers demangled to the names bench.resources uses; the encoding lines skipped."""
    (fixup,) = rows_of("sass-cuobjdump-head.sass")
    assert fixup["kernel"] == "aggregate_fixup_kernel<float>" and fixup["arch"] == "90"
    code = sass.parse(open(os.path.join(DATA, "sass-cuobjdump-head.sass")).read())
    ((name, instructions),) = code.items()
    assert name.startswith("_ZN3mgg7kernels22aggregate_fixup_kernel")
    assert [i.addr for i in instructions] == list(range(0, 0xC0, 0x10))
    assert (instructions[-1].guard, instructions[-1].opcode) == ("@P0", "EXIT")


def test_registers_read_and_written():
    """A 128-bit load writes four registers, a 64-bit address is a pair, a store reads its data's
    width, a shuffle's register comes after its predicate, uniform registers are not registers."""
    ldg, stg, shfl, wide, setp, umov = code_of(
        "@!P2 LDG.E.128.CONSTANT R4, desc[UR38][R10.64+0x8]",
        "STG.E.128 desc[UR4][R2.64], R8",
        "SHFL.IDX PT, R25, R20, R12, 0x1f",
        "IMAD.WIDE.U32 R6, R25.reuse, R8, R28",
        "ISETP.GE.AND P1, PT, R27, R18, PT",
        "UMOV UR4, 0xffffffff",
    )
    assert (ldg.guard, ldg.writes, ldg.reads) == ("@!P2", regs(4, 5, 6, 7), regs(10, 11))
    assert (stg.writes, stg.reads) == (0, regs(2, 3, 8, 9, 10, 11))
    assert (shfl.writes, shfl.reads) == (regs(25), regs(20, 12))
    assert (wide.writes, wide.reads) == (regs(6, 7), regs(25, 8, 28, 29))
    assert (setp.writes, setp.reads) == (0, regs(27, 18))
    assert (umov.writes, umov.reads) == (0, 0)


def test_batched_gather_keeps_four_rows_in_flight():
    """The review's K = 4 experiment: four predicated LDG.E.128 into R4, R24, R32, R8, then the
    FMAs; the windows from each load are 4, 3, 2, 1."""
    (row,) = rows_of("sass-f32-batched-k4.sass")
    assert (row["kernel"], row["ldg128_loads"], row["ldg128_in_flight"]) == (F32_BLOCKS, 4, 4)
    assert row["narrow_row_loads"] == ""  # fp32: not asked
    code = code_of_file("sass-f32-batched-k4.sass")
    succ = sass.successors(code)
    assert [sass.window(code, succ, k) for k, i in enumerate(code) if sass.is_ldg128(i)] == [4, 3, 2, 1]


def code_of_file(name: str) -> list[sass.Instruction]:
    (code,) = sass.parse(open(os.path.join(DATA, name)).read()).values()
    return code


def test_one_row_at_a_time_is_depth_one():
    """The blocks kernel's gather loop: a predicated load into R4 whose FMAs follow, then a load
    branched around (@P2 BRA), into R4 again."""
    (row,) = rows_of("sass-f32-one-row.sass")
    assert (row["ldg128_loads"], row["ldg128_in_flight"]) == (2, 1)


def test_window_ends_at_any_register_of_a_load():
    """R4..R7 are all the load's: a read of R7, or a load into R6, waits for it; so does a load
    whose address is a pending register, or a write to one. Narrower loads do not count."""
    assert depth(LDG4, LDG8, "FFMA R0, R8, R1, R0") == 2
    assert depth(LDG4, "FADD R0, R7, R0", LDG8) == 1
    assert depth(LDG4, "LDG.E.128 R6, desc[UR4][R2.64+0x10]") == 1
    assert depth(LDG4, "LDG.E.128 R8, desc[UR4][R6.64]") == 1
    assert depth(LDG4, "CS2R R6, SRZ", LDG8) == 1
    assert depth(LDG4, "LDG.E.64 R8, desc[UR4][R2.64]", LDG12) == 2


def test_window_follows_predicates_and_branches():
    """Predicated loads count and predicated reads end a window; a conditional branch is followed
    both ways (the deepest path counts), an unconditional one to its target only, a divergence
    branch as not taken, a loop's back edge into the next iteration; EXIT, a call, a barrier and a
    scoreboard wait end a path."""
    assert depth(LDG4, "@P1 " + LDG8, "@!P1 FFMA R0, R9, R1, R0", "@P1 " + LDG12) == 2
    # 0x00 load; 0x10 branch to 0x30; 0x20 use; 0x30 load; 0x40 use
    assert depth(LDG4, "@P0 BRA 0x30", USE4, LDG8, USE4) == 2  # taken: both loads before the use
    assert depth(LDG4, "BRA 0x30", USE4, LDG8, USE4) == 2
    assert depth(LDG4, "@!PT BRA 0x30", USE4, LDG8, USE4) == 1  # never taken
    assert depth(LDG4, "BRA.DIV UR4, 0x30", USE4, LDG8, USE4) == 1
    # a loop: the back edge (0x30) takes the window from 0x20 to the next iteration's load (0x00),
    # before the use of R4 after the loop (0x40)
    assert depth(LDG12, "FFMA R0, R12, R1, R0", LDG4, "@P0 BRA 0x0", USE4) == 2
    for stop in ("EXIT", "CALL.ABS.NOINC 0x0", "BAR.SYNC.DEFER_BLOCKING 0x0", "DEPBAR.LE SB0, 0x0"):
        assert depth(LDG4, stop, LDG8) == 1
    assert depth(LDG4, "@P0 EXIT", LDG8) == 2


def test_narrow_row_loads_of_bf16():
    """The bf16 blocks kernel reads a row's 16 bytes as two LDG.E.64 (unpacked by PRMT/SHF/IMAD.U32
    into FFMAs): both are row loads. An int64 (a row end) loaded as LDG.E.64 and shuffled is not."""
    (row,) = rows_of("sass-bf16-row-pairs.sass")
    assert row["kernel"] == "aggregate_blocks_kernel<__nv_bfloat16, TableFetch, TableFetch>"
    assert (row["ldg128_loads"], row["ldg128_in_flight"], row["narrow_row_loads"]) == (0, 0, 2)
    row_end = code_of(
        "@!P0 LDG.E.EF.64 R2, desc[UR10][R4.64]", "SHFL.IDX PT, R14, R3, 0x1, 0x1f", "FFMA R0, R14, R1, R0"
    )
    assert sass.measure_code("k<__half>", row_end)["narrow_row_loads"] == 0
    fp16 = code_of("LDG.E.U16 R2, desc[UR10][R4.64]", "HADD2.F32 R3, -RZ, R2.H0_H0", "FFMA R0, R3, R1, R0")
    assert sass.measure_code("k<__half>", fp16)["narrow_row_loads"] == 1


def test_check_holds_every_16_byte_range_kernel():
    """--check: each aggregate_ranges_kernel reading 16-byte rows needs the required depth and, at
    fp16/bf16, no narrow row load; the column-per-load variant and other kernels are reported only;
    no range kernel at all is a failure of its own."""
    (k4,) = rows_of("sass-f32-batched-k4.sass")
    (one,) = rows_of("sass-f32-one-row.sass")
    (pairs,) = rows_of("sass-bf16-row-pairs.sass")
    assert sass.violations([dict(k4, kernel=RANGES), one, pairs], required=4) == []
    (v,) = sass.violations([dict(k4, kernel=RANGES), dict(one, kernel=RANGES.replace("1,", "2,", 1))], required=4)
    assert "aggregate_ranges_kernel<float, 2, true, TableFetch, TableFetch, 2>@sm_90" in v
    assert "1 LDG.E.128 row loads in flight before first use, 4 required" in v
    column = dict(one, kernel=RANGES.replace("true", "false"))
    assert sass.violations([dict(k4, kernel=RANGES), column], required=4) == []
    bf16 = dict(pairs, kernel="aggregate_ranges_kernel<__nv_bfloat16, 1, true, TableFetch, TableFetch, 2>")
    assert len(sass.violations([dict(bf16, ldg128_in_flight=4)], required=4)) == 1  # its LDG.E.64 pairs
    assert len(sass.violations([bf16], required=4)) == 2
    (none,) = sass.violations([one, pairs, column], required=4)
    assert none.startswith("no aggregate_ranges_kernel found") and "aggregate_blocks_kernel" in none
    assert sass.rows_in_flight() >= 1  # csrc/core/limits.h's kRowsInFlight


def test_resources_check_fails_on_the_sass_check(monkeypatch, capsys):
    """CI's bench.resources --check runs bench.sass's check on the sm_90 cubins it compiled."""
    from bench import cubins

    monkeypatch.setattr(cubins, "find_nvcc", lambda: "nvcc")
    monkeypatch.setattr(cubins, "compile_kernels", lambda nvcc, archs, folder, log=print: [])
    monkeypatch.setattr(sass, "find_cuobjdump", lambda nvcc: "cuobjdump")
    monkeypatch.setattr(sass, "measure", lambda cuobjdump, compiled: rows_of("sass-f32-one-row.sass"))
    assert resources.main(["--archs", "90", "--check"]) == 1
    assert "bench.sass: no aggregate_ranges_kernel found" in capsys.readouterr().err
    assert resources.main(["--archs", "80", "--check"]) == 0  # no sm_90 code: no SASS to check
    monkeypatch.setattr(sass, "find_cuobjdump", lambda nvcc: None)
    assert resources.main(["--archs", "90", "--check"]) == 1
    assert "no cuobjdump" in capsys.readouterr().err

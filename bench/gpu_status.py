"""The GPU ledger, bench/results/GPU_STATUS.md: one line per thing only a GPU can show (issue 42), with
the commit its last GPU run checked out, the date, the GPU and the result, and a state this module
works out from git:

- `never run`: no GPU run yet (its commit cell is `-`);
- `current`: every file that goes into the kernels is as it was at that commit;
- `stale`: one did (committed or not), so the result describes kernels this checkout no longer has;
- `unknown`: the commit is not in this clone (a shallow one).

    python -m bench.gpu_status            # rewrite the state column of the ledger
    python -m bench.gpu_status --check    # exit 1 where the ledger's states are not what git says

A GPU session fills in commit, date, GPU and result for what it ran; a kernel change needs only the
first command (tests/bench/test_gpu_status.py fails until it is run).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

LEDGER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "GPU_STATUS.md")

# What goes into the kernels and their launches: the extension's sources (not its CPU-only test
# harness) and the plan that builds the schedules the kernels walk. A commit touching any of these
# after a GPU run makes that run's result stale.
# (Paths from the top of the repository, wherever git runs.)
KERNEL_SOURCES = (":(top)csrc", ":(top,exclude)csrc/tests", ":(top)mgg/plan")

NEVER = "never run"
STALE = "stale: the kernel sources changed since"
COLUMNS = ("item", "commit", "date", "GPU", "result", "state")


def _git(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=60)


def state_of(commit: str, repo: str) -> str:
    """The state of a ledger line whose GPU run checked out `commit`, against the working tree of `repo`."""
    commit = commit.strip().strip("`")
    if commit in ("", "-"):
        return NEVER
    if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return f"unknown: {commit} is not in this clone"
    # the working tree against the run's commit: a change counts before it is committed, so the
    # ledger can be restated in the same commit, and a revert makes the line current again
    diff = _git(repo, "diff", "--quiet", commit, "--", *KERNEL_SOURCES)
    if diff.returncode not in (0, 1):
        raise RuntimeError(f"git diff {commit} failed: {diff.stderr.strip()}")
    return "current" if diff.returncode == 0 else STALE


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def restate(text: str, repo: str) -> str:
    """The ledger `text` with every table line's state column worked out again."""
    out, header = [], None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            out.append(line)
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise ValueError(f"the ledger table's header lacks the columns {missing}")
        elif not set("".join(cells)) <= set("-: "):  # not the |---|---| line
            if len(cells) != len(header):
                raise ValueError(f"ledger line has {len(cells)} cells, the header {len(header)}: {line.strip()}")
            cells[header.index("state")] = state_of(cells[header.index("commit")], repo)
            line = "| " + " | ".join(cells) + " |"
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_status", description=__doc__.splitlines()[0])
    ap.add_argument("--ledger", default=LEDGER, help="the ledger file (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a state is out of date")
    args = ap.parse_args(argv)
    repo = os.path.dirname(os.path.abspath(args.ledger))
    with open(args.ledger) as f:
        text = f.read()
    new = restate(text, repo)
    if args.check:
        if new != text:
            print(f"{args.ledger}: states out of date; run python -m bench.gpu_status", file=sys.stderr)
            return 1
        print(f"{args.ledger}: every state is what git says")
        return 0
    if new != text:
        tmp = args.ledger + ".tmp"
        with open(tmp, "w") as f:
            f.write(new)
        os.replace(tmp, args.ledger)
    print(f"{args.ledger}: {'states rewritten' if new != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The emulator's build cache (simt/emulator.py): a binary is rebuilt when any source it compiles
changes, so every file its translation units include (transitively, by quoted #include) must be
one that names the build. A header left out would let the tests run a stale binary."""

import re
from pathlib import Path

import pytest

from simt import emulator

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _included(sources: list) -> set:
    seen, todo = set(), [Path(s).resolve() for s in sources]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for name in INCLUDE.findall(p.read_text()):
            todo += [c.resolve() for c in (p.parent / name, emulator.CSRC / "tests" / "simt" / name) if c.exists()][:1]
    return seen


@pytest.mark.parametrize("target", sorted(emulator.TARGETS))
def test_every_included_file_names_the_build(target):
    hashed = {p.resolve() for p in emulator.digest_files()}
    missing = sorted(
        str(p.relative_to(emulator.CSRC)) for p in _included([s for s, _ in emulator.TARGETS[target]]) - hashed
    )
    assert not missing, f"{target} includes files its build digest does not hash: {missing}"

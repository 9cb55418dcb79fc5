"""The files that ship inside the package, next to this module: Cora in the Planetoid raw format
and Mt-KaHyPar's deterministic preset (mgg.partitioning.methods)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
MTKAHYPAR_INI = HERE / "mtkahypar-deterministic.ini"


def bundled_planetoid_dir() -> str:
    return str(HERE / "planetoid")

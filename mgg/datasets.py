"""Where mgg finds datasets by name: Cora ships with the package (Planetoid raw format)."""
from pathlib import Path


def bundled_planetoid_dir() -> str:
    return str(Path(__file__).parent / "data" / "planetoid")

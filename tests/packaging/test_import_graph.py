"""The layout stays a layering: no import circle among the modules of mgg/ and bench/ (imports
inside functions count too), none among their folders either (a package and the modules beside it,
mgg.nn -> mgg.distributed -> mgg.nn say, even where no two files form a circle), and the library
never imports the repository's bench/ or tests/, nor bench/ tests/ (the SIMT emulator both use is simt/).

The graph is read with ast, not by importing, so that a lazy import in a function that no test
calls is seen as well."""

import ast
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mgg", "bench", "simt")
GENERATED = ("mgg._C", "mgg._build")  # the extension and its build record: modules, though no .py here


def _modules(root: Path) -> dict[str, Optional[Path]]:
    """Dotted name -> file of every Python module under the packages (None: a generated one)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found | {name: None for name in GENERATED}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules (of any package) that one module imports, anywhere in its body. `from P import x`
    names the module P.x where x is a module, else P itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and _is_type_checking(block.test)
        for stmt in block.body
        for n in ast.walk(stmt)
    }  # `if TYPE_CHECKING:` imports never run
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            for alias in node.names:
                sub = f"{stem}.{alias.name}"
                targets.add(sub if sub in modules else stem)
    return targets


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules it imports, for the modules under mgg/ and bench/ (edges to other
    top-level names, torch or tests say, are kept so that a test can look for them)."""
    modules = _modules(root)
    return {name: _imported(name, path, modules) - {name} if path else set() for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start] & graph.keys())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt] & graph.keys()))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def folders(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph of the top-level entries of mgg/ and bench/ (mgg.nn, mgg.plan, mgg.cli, ...): an
    edge where some module of one imports some module of the other."""

    def entry(name: str) -> str:
        parts = name.split(".")
        return ".".join(parts[:2]) if parts[0] in PACKAGES else parts[0]

    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        out.setdefault(entry(name), set()).update(entry(t) for t in targets if entry(t) != entry(name))
    return out


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_no_import_circle_between_folders():
    assert circles(folders(import_graph())) == []


def test_the_library_imports_neither_bench_nor_tests():
    graph = import_graph()
    wrong = sorted(
        (name, target)
        for name, targets in graph.items()
        if name.split(".")[0] == "mgg"
        for target in targets
        if target.split(".")[0] in ("bench", "tests")
    )
    assert wrong == []


def test_bench_and_the_emulator_import_no_tests():
    graph = import_graph()
    wrong = sorted(
        (name, target)
        for name, targets in graph.items()
        if name.split(".")[0] in ("bench", "simt")
        for target in targets
        if target.split(".")[0] == "tests"
    )
    assert wrong == []


def test_a_circle_added_on_purpose_is_found(tmp_path):
    """The check itself: a copy of the tree with one lazy import that closes a loop fails it."""
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text())
    graph = import_graph(tmp_path)
    assert "mgg.errors" in graph["mgg.graph"]
    errors = tmp_path / "mgg" / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _loop():\n    from .graph import Graph  # noqa: F401\n")
    assert ["mgg.errors", "mgg.graph"] in circles(import_graph(tmp_path))
    assert circles(folders(import_graph(tmp_path))) != []
    errors.write_text(errors.read_text().replace("from .graph import Graph", "import math"))
    assert circles(folders(import_graph(tmp_path))) == []
    stats = tmp_path / "mgg" / "data" / "stats.py"  # a folder loop no two files make: data -> nn -> ... -> data
    stats.write_text(stats.read_text() + "\n\ndef _layers():\n    from ..nn import models  # noqa: F401\n")
    assert circles(import_graph(tmp_path)) == []
    assert any("mgg.data" in c and "mgg.nn" in c for c in circles(folders(import_graph(tmp_path))))
    bench_edge = tmp_path / "mgg" / "info.py"
    bench_edge.write_text(bench_edge.read_text() + "\n\ndef _bench():\n    import bench.cli  # noqa: F401\n")
    assert "bench.cli" in import_graph(tmp_path)["mgg.info"]
    counters = tmp_path / "bench" / "counters.py"  # bench reaching into tests/ is an edge the check sees
    counters.write_text(
        counters.read_text() + "\n\ndef _tests():\n    from tests.kernels import test_cuda  # noqa: F401\n"
    )
    assert "tests.kernels" in import_graph(tmp_path)["bench.counters"]

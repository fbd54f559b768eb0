"""The layer contract of ``src/stampede`` (docs/architecture.md, "Layers"): packages are ranked,
a module imports only from its own package or from a package of a lower rank, and the imports
between modules form no circle. Every import statement counts, including one inside a function,
so a lazy import cannot hide a circle or an upward dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "stampede"
# Lowest first; a top-level module (``stampede/errors.py``, ``stampede/cli.py``) is its own
# entry. Packages of one rank do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("algo", "models", "envs"),
    ("config",),
    ("rundir",),
    ("eval",),
    ("train",),
    ("report",),
    ("search",),
    ("cli",),
)
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(src: Path = SRC) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted(src.rglob("*.py"))}


def imports(path: Path, known: set[str]) -> set[str]:
    """The stampede modules ``path`` imports (a name imported from a package counts as that
    package's submodule where there is one)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("stampede")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not node.module.startswith("stampede"):
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return {m for m in found if m in known}


def package(module: str) -> str:
    """``stampede.train.learner`` -> ``train``; ``stampede.errors`` -> ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def graph(src: Path = SRC) -> dict[str, set[str]]:
    known = modules(src)
    return {name: imports(path, set(known)) - {name} for name, path in known.items()}


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import from a lower-ranked package to a higher or same-ranked other one."""
    wrong = []
    for module, targets in edges.items():
        here = package(module)
        for target in sorted(targets):
            there = package(target)
            if here == there or module == "stampede" or target == "stampede":
                continue
            if here not in RANK or there not in RANK:
                wrong.append(f"{module} -> {target}: a package outside the layers")
            elif RANK[there] >= RANK[here]:
                wrong.append(f"{module} (rank {RANK[here]}) imports {target} (rank {RANK[there]})")
    return wrong


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (one path around each strongly connected component)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_layer() -> None:
    packages = {package(m) for m in modules()} - {""}
    assert packages == set(RANK)


def test_every_module_has_its_own_test_file() -> None:
    """tests/ mirrors src/: ``stampede/<package>/<module>.py`` is tested in
    ``tests/<package>/test_<module>.py`` (a top-level module in ``tests/test_<module>.py``)."""
    tests = SRC.parents[1] / "tests"
    missing = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "__init__.py"
        and not (tests / path.parent.relative_to(SRC) / f"test_{path.name}").is_file()
    ]
    assert missing == []


def test_no_import_goes_up_or_sideways() -> None:
    assert upward(graph()) == []


def test_there_is_no_import_circle() -> None:
    assert circles(graph()) == []


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("from stampede.train.learner import Learner\n", "upward"),
        ("def f():\n    from stampede.config.schema import Config\n", "upward"),
    ],
)
def test_the_checks_catch_a_planted_upward_import(
    tmp_path: Path, extra: str, expected: str
) -> None:
    """A copy of the tree with an import added to ``algo/vtrace.py`` (at the top, or lazily in a
    function) fails the check."""
    import shutil

    copy = tmp_path / "stampede"
    shutil.copytree(SRC, copy)
    vtrace = copy / "algo" / "vtrace.py"
    vtrace.write_text(vtrace.read_text() + "\n" + extra)
    wrong = upward(graph(copy))
    assert wrong, "the planted import was not caught"
    assert all("stampede.algo.vtrace" in w for w in wrong)


def test_the_checks_catch_a_planted_circle(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "stampede"
    shutil.copytree(SRC, copy)
    timing = copy / "train" / "timing.py"  # the learner imports it; now it imports the learner
    timing.write_text(timing.read_text() + "\ndef f():\n    from stampede.train import learner\n")
    assert circles(graph(copy)) != []

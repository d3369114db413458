"""The package's shape: no import circles, and the layers of ARCHITECTURE.md point down.

The import graph is read from the source with ``ast`` (nothing is imported), one node per module
of ``astream``. An edge is an ``import``/``from ... import`` statement; ``from pkg import name``
points at ``pkg.name`` when that is a module, else at ``pkg``. Imports under
``if TYPE_CHECKING:`` never run and are left out. Each edge records whether it runs when the
module is imported (module level, class bodies, ``try``/``if`` blocks) or only when a function
is called (a lazy import inside a ``def``).
"""

from __future__ import annotations

import ast
import itertools
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import astream

PACKAGE_DIR = Path(astream.__file__).parent


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    lazy: bool  # inside a function body: runs on call, not on import
    line: int


def _module_names() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> list[tuple[str, list[str], int, bool]]:
    """(module, imported names, line, lazy) for each import statement that can run."""
    found: list[tuple[str, list[str], int, bool]] = []

    def walk(nodes: list[ast.stmt], lazy: bool) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(node.body, True)
                continue
            if isinstance(node, ast.If) and _is_type_checking(node):
                walk(node.orelse, lazy)
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.append((alias.name, [], node.lineno, lazy))
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"relative import at line {node.lineno}"
                found.append((node.module or "", [a.name for a in node.names], node.lineno, lazy))
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(node, field, None)
                if isinstance(sub, list):
                    walk(sub, lazy)
            for handler in getattr(node, "handlers", []):
                walk(handler.body, lazy)
            for case in getattr(node, "cases", []):
                walk(case.body, lazy)

    walk(tree.body, False)
    return found


@cache
def import_graph() -> tuple[dict[str, list[Edge]], dict[str, list[tuple[str, bool, int, str]]]]:
    """(edges between astream modules, per module every import: (module, lazy, line, text))."""
    modules = _module_names()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, list[Edge]] = {}
    raw: dict[str, list[tuple[str, bool, int, str]]] = {}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        out: list[Edge] = []
        raw[mod] = []
        for base, names, line, lazy in _imports(tree):
            text = f"from {base} import {', '.join(names)}" if names else f"import {base}"
            raw[mod].append((base, lazy, line, text))
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules] or [base]
            if len(targets) < len(names):  # some names are attributes of ``base`` itself
                targets.append(base)
            for target in {resolve(t) for t in targets}:
                if target is not None and target != mod:
                    out.append(Edge(mod, target, lazy, line))
        edges[mod] = out
    return edges, raw


def _cycles(include_lazy: bool) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    edges, _ = import_graph()
    graph = {
        m: sorted({e.target for e in es if include_lazy or not e.lazy}) for m, es in edges.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = itertools.count()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def _describe(component: list[str], include_lazy: bool) -> str:
    edges, _ = import_graph()
    inside = set(component)
    lines = [
        f"  {e.source} -> {e.target} (line {e.line}{', lazy' if e.lazy else ''})"
        for m in component
        for e in edges[m]
        if e.target in inside and (include_lazy or not e.lazy)
    ]
    return "\n".join(lines)


# The layers of ARCHITECTURE.md, lowest first: an import, lazy ones included, points at its own
# layer or one below it. Every module is placed (a new package or top-level module must be
# added here); each package's __init__.py states its layer's rule in words.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("errors", ("astream.errors",)),
    # astream.parquet's pure modules (all but io_*) keep core's rules: see _layer
    ("core", ("astream.core",)),
    ("foundation", ("astream.bridge",)),
    ("storage", ("astream.storage",)),
    ("runtime", ("astream.runtime",)),
    (
        "api",
        (
            "astream.dataset",
            "astream.local",
            "astream.packing",
            "astream.plan",
            "astream.shared",
            "astream.stream",
        ),
    ),
    (
        "top",
        (
            "astream",
            "astream.__main__",
            "astream.aio",
            "astream.base",
            "astream.cli",
            "astream.demo",
            "astream.integrations",
            "astream.metrics",
            "astream.ray",
            "astream.spark",
            "astream.testing",
            "astream.torch",
            "astream.writer",
        ),
    ),
]
LAYER_NAMES = [name for name, _ in LAYERS]


def _layer(module: str) -> int | None:
    """The index in LAYERS of ``module``'s layer (None: not placed)."""
    if module == "astream.parquet" or module.startswith("astream.parquet."):
        io = module.rpartition(".")[2].startswith("io_")
        return LAYER_NAMES.index("runtime" if io else "core")
    for i, (_, roots) in enumerate(LAYERS):
        for root in roots:
            if module == root or (root != "astream" and module.startswith(root + ".")):
                return i
    return None


def test_graph_sees_the_package() -> None:
    edges, _ = import_graph()
    assert {"astream.bridge", "astream.writer.mds", "astream.runtime.engine"} <= set(edges)
    targets = {(e.target, e.lazy) for e in edges["astream.writer.merge"]}
    assert ("astream.writer.output", False) in targets
    assert ("astream.writer.remote", True) in targets


def test_no_import_cycle_at_module_level() -> None:
    cycles = _cycles(include_lazy=False)
    assert cycles == [], "import circle(s) inside astream:\n" + "\n\n".join(
        _describe(c, include_lazy=False) for c in cycles
    )


def test_no_import_cycle_even_through_lazy_imports() -> None:
    """A lazy import inside a function does not break ``import``, but a circle through one is
    still two modules that each need the other: code sits in the wrong layer."""
    cycles = _cycles(include_lazy=True)
    assert cycles == [], "import circle(s) through lazy imports:\n" + "\n\n".join(
        _describe(c, include_lazy=True) for c in cycles
    )


def test_every_module_has_a_layer() -> None:
    edges, _ = import_graph()
    assert [m for m in sorted(edges) if _layer(m) is None] == []


def test_imports_point_down_the_layers() -> None:
    edges, _ = import_graph()
    up = []
    for mod, out in sorted(edges.items()):
        for e in out:
            src, dst = _layer(mod), _layer(e.target)
            if src is not None and dst is not None and dst > src:
                up.append(
                    f"{mod} ({LAYER_NAMES[src]}) -> {e.target} ({LAYER_NAMES[dst]}), "
                    f"line {e.line}{', lazy' if e.lazy else ''}"
                )
    assert up == [], "imports running up the layers:\n" + "\n".join(up)


def _violations(prefixes: tuple[str, ...], banned: tuple[str, ...], lazy_too: bool) -> list[str]:
    _, raw = import_graph()
    bad = []
    for mod, imports in sorted(raw.items()):
        if not mod.startswith(prefixes):
            continue
        for name, lazy, line, text in imports:
            if (lazy_too or not lazy) and (
                name in banned or name.startswith(tuple(b + "." for b in banned))
            ):
                bad.append(f"{mod}, line {line}{' (lazy)' if lazy else ''}: {text}")
    return bad


def test_storage_writer_core_never_import_runtime_at_module_level() -> None:
    bad = _violations(
        ("astream.storage", "astream.writer", "astream.core"), ("astream.runtime",), lazy_too=False
    )
    assert bad == []


def test_storage_and_core_never_import_runtime_or_above() -> None:
    above = ("astream.runtime", "astream.writer", "astream.torch", "astream.dataset", "astream.cli")
    assert _violations(("astream.storage", "astream.core"), above, lazy_too=True) == []


def test_core_is_pure() -> None:
    impure = ("asyncio", "torch", "astream.storage", "astream.bridge", "aiohttp", "concurrent")
    assert _violations(("astream.core",), impure, lazy_too=True) == []


def _parquet_pure() -> tuple[str, ...]:
    """The modules of astream/parquet/ on core's layer: all but the ``io_*`` ones."""
    edges, _ = import_graph()
    return tuple(
        m
        for m in edges
        if m.startswith("astream.parquet.") and not m.rpartition(".")[2].startswith("io_")
    )


def test_parquet_layers() -> None:
    """astream/parquet/ keeps core's rules in its pure modules (no runtime or above, no store,
    no asyncio), a pure module never imports an ``io_*`` one, and core never imports parquet."""
    pure = _parquet_pure()
    assert {"astream.parquet.table", "astream.parquet.thrift", "astream.parquet.pages"} <= set(pure)
    above = ("astream.runtime", "astream.writer", "astream.torch", "astream.dataset", "astream.cli")
    impure = ("asyncio", "torch", "astream.storage", "astream.bridge", "aiohttp", "concurrent")
    assert _violations(pure, above + impure, lazy_too=True) == []
    edges, _ = import_graph()
    bad = [
        f"{e.source} -> {e.target} (line {e.line})"
        for m in pure
        for e in edges[m]
        if e.target.rpartition(".")[2].startswith("io_")
    ]
    assert bad == []
    assert _violations(("astream.core",), ("astream.parquet",), lazy_too=True) == []


def test_bridge_and_errors_are_foundation() -> None:
    """The bridge and the error tree import only the standard library (and errors)."""
    _, raw = import_graph()
    for mod in ("astream.bridge", "astream.errors"):
        for name, _lazy, line, text in raw[mod]:
            top = name.split(".")[0]
            ok = top in sys.stdlib_module_names or top == "__future__" or name == "astream.errors"
            assert ok, f"{mod}, line {line}: {text}"


def _unit(module: str) -> str:
    """The package a module belongs to (``astream.runtime`` for ``astream.runtime.cache``), or
    the module itself at the top level (``astream.dataset``)."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE_DIR / parts[1]).is_dir()):
        return ".".join(parts[:2])
    return module


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_crossings() -> list[str]:
    """``from X import _name`` and ``alias._name`` (alias an imported astream module) where X is
    in another package than the importing module."""
    modules = _module_names()
    found = []
    for mod, path in sorted(modules.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    if sub in modules:
                        aliases[a.asname or a.name] = sub
                    elif _private(a.name) and _unit(node.module) != _unit(mod):
                        found.append(f"{mod}, line {node.lineno}: {a.name} from {node.module}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and a.name in modules:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in aliases:
                target = aliases[base.id]
                if _unit(target) != _unit(mod):
                    found.append(f"{mod}, line {node.lineno}: {base.id}.{node.attr} ({target})")
    return found


def test_no_private_name_crosses_a_package() -> None:
    """A ``_name`` is its package's own: another package (or top-level module) that needs it
    needs it public, in the layer where it belongs."""
    assert _private_crossings() == []


def test_runtime_never_imports_torch_or_a_backend() -> None:
    backends = tuple(
        f"astream.storage.{m}" for m in ("s3", "s3sdk", "gcs", "azure", "http", "local", "h1")
    )
    assert _violations(("astream.runtime",), ("torch", *backends), lazy_too=True) == []


def test_each_layer_states_what_it_may_import() -> None:
    for pkg in ("core", "runtime", "storage", "cli", "torch", "integrations", "writer",
                "metrics", "testing"):  # fmt: skip
        doc = ast.get_docstring(ast.parse((PACKAGE_DIR / pkg / "__init__.py").read_text())) or ""
        assert "May import:" in doc, f"astream/{pkg}/__init__.py states no import rule"


def _targets(prefix: str) -> set[str]:
    """The units (packages or top-level modules) that modules under ``prefix`` import."""
    edges, _ = import_graph()
    return {
        _unit(e.target)
        for m, out in edges.items()
        if m == prefix or m.startswith(prefix + ".")
        for e in out
        if _unit(e.target) != prefix
    }


def test_writer_and_testing_import_what_their_init_says() -> None:
    writer_may = {"astream.errors", "astream.core", "astream.bridge", "astream.storage"}
    assert _targets("astream.writer") <= writer_may, _targets("astream.writer") - writer_may
    assert _targets("astream.testing") == set()


def test_only_main_imports_the_cli() -> None:
    edges, _ = import_graph()
    users = {
        m
        for m, out in edges.items()
        if _unit(m) != "astream.cli"
        for e in out
        if _unit(e.target) == "astream.cli"
    }
    assert users == {"astream.__main__"}


# -- size: no source file over 600 lines, no function over 80 ------------------------------

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80  # from the ``def`` line to the last line of the body
# Not split yet. This list may only shrink: a new file or function over its limit fails, and
# so does an entry here that is no longer over it (delete the entry once it is split).
TOO_LONG_ALLOWED: set[str] = set()


def too_long() -> dict[str, int]:
    """Every source file of astream over MAX_FILE_LINES and every function (methods and
    nested functions included, named by their path of classes and functions) over
    MAX_FUNCTION_LINES, with its length in lines."""
    found: dict[str, int] = {}

    def walk(node: ast.AST, rel: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert child.end_lineno is not None
                n = child.end_lineno - child.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found[f"{rel}::{prefix}{child.name}"] = n
                walk(child, rel, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, rel, f"{prefix}{child.name}.")

    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR.parent).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            found[rel] = lines
        walk(ast.parse(text, rel), rel, "")
    return found


def test_files_and_functions_stay_small() -> None:
    found = too_long()
    new = {k: n for k, n in found.items() if k not in TOO_LONG_ALLOWED}
    assert new == {}, "over the size limits (split by concern, not by line count):\n" + "\n".join(
        f"  {k}: {n} lines" for k, n in sorted(new.items())
    )
    gone = sorted(TOO_LONG_ALLOWED - set(found))
    assert gone == [], f"split now: remove from TOO_LONG_ALLOWED: {gone}"

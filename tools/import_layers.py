"""The import graph of ``opaque_ops/``: circles and imports that run up the layers.

Every ``import`` and ``from ... import`` in the package is an edge, also the
ones inside functions (a function-level import is still a dependency: it
only runs later).  The layers, lowest first::

    errors (and _version, _digest, _records) -> build -> model -> _native -> ops -> interpreter -> isolate -> top

where *top* is everything else (``opaque_ops/__init__``, ``testing``,
``compat``, ``kernels``, ``runtime``, ``cli/``...).  An import may go down
or sideways (within one layer), never up; and ``_native``, the only package
that sees cffi pointers, imports nothing of opaque_ops but ``errors``,
``_version``, ``_digest`` and ``_records`` (the lazy dataclasses): it takes
policy (XNNPACK's aliases, the host architecture...) as arguments.

Usage::

    python tools/import_layers.py            # prints the findings; exit status 1 if any
    python tools/import_layers.py --edges    # also every edge, "a -> b"
    python tools/import_layers.py --root DIR # another copy of the package

It reads the source with :mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = "opaque_ops"
LAYERS = ["errors", "build", "model", "_native", "ops", "interpreter", "isolate"]
TOP = len(LAYERS)  # every other module of the package
# What _native may import besides itself.
NATIVE_MAY_IMPORT = {"errors", "_version", "_digest", "_records"}


def modules(root: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file under ``root`` (the package directory)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of a (possibly relative) import target."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def edges(root: Path) -> set[tuple[str, str]]:
    """Every ``(importer, imported)`` pair between modules of the package."""
    mods = modules(root)
    found = set()
    for mod, path in mods.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_package, node.level, node.module)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    # `from pkg import module` names the module; `from mod import name`, the module.
                    targets.append(sub if sub in mods else base)
            for t in targets:
                # `import a.b.c` depends on the deepest module of the package it names.
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod and t.split(".")[0] == PACKAGE:
                    found.add((mod, t))
    return found


# Modules of the bottom layer besides errors: the version string, the digest, the lazy dataclasses.
BOTTOM = {"_version", "_digest", "_records"}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in BOTTOM:
        return 0
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return TOP


def _name(rank: int) -> str:
    return LAYERS[rank] if rank < TOP else "top"


def upward(found) -> list[str]:
    """Edges from a lower layer to a higher one, and _native importing anything but its allowance."""
    out = []
    for a, b in sorted(found):
        la, lb = layer_of(a), layer_of(b)
        if lb > la:
            out.append(f"{a} ({_name(la)}) imports {b} ({_name(lb)}), a higher layer")
        elif _name(la) == "_native" and lb != la and b.split(".")[1] not in NATIVE_MAY_IMPORT:
            out.append(
                f"{a} (_native) imports {b}: _native takes policy as arguments, "
                f"and imports only {sorted(NATIVE_MAY_IMPORT)}"
            )
    return out


def cycles(found) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, list[str]] = {}
    for a, b in found:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    counter = 0

    def visit(v: str) -> None:  # recursion depth is bounded by the package's module count
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent / PACKAGE,
        help="the package directory (default: this checkout's opaque_ops/)",
    )
    ap.add_argument("--edges", action="store_true", help="print every edge too")
    args = ap.parse_args(argv)
    found = edges(args.root)
    if args.edges:
        for a, b in sorted(found):
            print(f"{a} -> {b}")
    circles = cycles(found)
    ups = upward(found)
    for comp in circles:
        print(f"circle of {len(comp)} modules: {', '.join(comp)}")
    for line in ups:
        print(f"upward: {line}")
    print(f"{len(found)} edges, {len(circles)} circles, {len(ups)} upward imports")
    return 1 if circles or ups else 0


if __name__ == "__main__":
    sys.exit(main())

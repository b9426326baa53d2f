"""Print which of Punctual's top-level packages each one imports, and fail on
any import against the layering.

    python tools/import_graph.py [ROOT]

The layers, bottom to top (a package may import only packages below it):

    core -> accounts -> jobs -> alerts -> runs -> {dispatch, api, console} -> ops -> scheduler_site

core is the shared helpers, accounts the API tokens and rate limits, jobs
the job rows and schedule math, alerts the alert channels and ledger,
runs the runs and leases. Above runs, three
packages share one rank: dispatch the engine's loops, api the REST API and
console the admin. Each may import the layers below, and none of the three
imports another: the faces and the engine stand side by side on the same
domain. ops (operations and the demo) sits above them, and scheduler_site
(settings, urls, the admin site) is the wiring, which may import all of
them. Every import counts: module level, inside a function, under
TYPE_CHECKING, and ``importlib.import_module("...")`` with a literal name,
so a cycle cannot hide in a function body. Migrations and tests are left out.

Exits 1, naming each offending import, if a package imports one at its own
rank or above (which is also how a cycle shows), else 0. Standard library only.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

# Bottom to top; the packages of one rank may not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("accounts",),
    ("jobs",),
    ("alerts",),
    ("runs",),
    ("dispatch", "api", "console"),
    ("ops",),
    ("scheduler_site",),
)
PACKAGES = tuple(name for rank in LAYERS for name in rank)
RANK = {name: i for i, rank in enumerate(LAYERS) for name in rank}
# Each package's place in PACKAGES: a cycle is reported once, from its first member.
ORDER = {name: i for i, name in enumerate(PACKAGES)}
SKIP_DIRS = {"migrations", "tests", "__pycache__"}


def imported_names(tree: ast.AST) -> list[tuple[str, int]]:
    """(dotted module name, line) of every absolute import in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in {"import_module", "__import__"}
                )
            )
        ):
            found.append((node.args[0].value, node.lineno))
    return found


def collect(root: Path) -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> ["path:line", ...]."""
    graph: dict[str, dict[str, list[str]]] = {name: defaultdict(list) for name in PACKAGES}
    for package in PACKAGES:
        base = root / package
        for path in sorted(base.rglob("*.py")):
            if SKIP_DIRS.intersection(path.relative_to(base).parts[:-1]):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for module, line in imported_names(tree):
                top = module.split(".", 1)[0]
                if top in RANK and top != package:
                    graph[package][top].append(f"{path.relative_to(root)}:{line}")
    return graph


def violations(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    problems = []
    for package, targets in graph.items():
        for target, places in sorted(targets.items()):
            if RANK[target] >= RANK[package]:
                beside = " (the same rank)" if RANK[target] == RANK[package] else ""
                for place in places:
                    problems.append(f"{place}: {package} imports {target}{beside}")
    return problems


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Each package-level cycle once, as [a, b, ..., a]."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == start:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    found.append([*path, start])
            elif nxt not in path and ORDER[nxt] > ORDER[start]:
                walk(start, nxt, [*path, nxt])

    for start in PACKAGES:
        walk(start, start, [start])
    return found


def table(graph: dict[str, dict[str, list[str]]]) -> str:
    width = max(len(name) for name in PACKAGES)
    lines = [f"{'package'.ljust(width)}  imports"]
    for package in PACKAGES:
        targets = sorted(graph[package], key=ORDER.__getitem__)
        lines.append(f"{package.ljust(width)}  {', '.join(targets) or '-'}")
    return "\n".join(lines)


def order() -> str:
    """``core -> ... -> {dispatch, api, console} -> ...``: a shared rank in braces."""
    return " -> ".join(
        rank[0] if len(rank) == 1 else "{" + ", ".join(rank) + "}" for rank in LAYERS
    )


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    graph = collect(root)
    print(table(graph))
    problems = violations(graph)
    for cycle in cycles(graph):
        problems.append("cycle: " + " -> ".join(cycle))
    if problems:
        print(f"\nallowed order (each may import only the ranks before it): {order()}")
        print("\n".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

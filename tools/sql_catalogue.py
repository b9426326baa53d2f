"""Build the catalogue of Punctual's SQL, docs/reference/sql.md: every named
statement, whole, with its name, its module and the comment above it.

    python tools/sql_catalogue.py          # write the file (make sql)
    python tools/sql_catalogue.py --check  # exit 1 if it differs from what the code builds

The hot SQL is written as module-level constants, and many are built from
parts (CLAIM_EXPIRED is six) or completed at run time (``{scope}``), so no
single place in the code shows them whole. This script imports the product
packages (every top-level package; migrations, tests and the settings
modules left out) and reads every module-level constant with an UPPER_CASE
name whose value is SQL text: a string that contains an SQL keyword in
capitals, or whose name ends in ``_SQL``. Each is rendered:

- as it is, when it is complete;
- once per variant, when it has ``{name}`` placeholders that the code fills
  at run time: its module declares each one's texts as a
  ``core.sql.Placeholder``;
- as it is, placeholders and all, when it is a template that other named
  statements are formatted from (the statements that contain it are named).

A constant with a placeholder that is neither declared nor part of another
statement is an error: the catalogue could not show what the code sends.
The order is stable: module path, then line. tests/unit/test_sql_catalogue.py
fails when the checked-in file differs from what this builds.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import itertools
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.sql import Placeholder

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = Path("docs") / "reference" / "sql.md"
SKIP_DIRS = {"migrations", "tests", "__pycache__"}

NAME = re.compile(r"_?[A-Z][A-Z0-9_]*")
# Capitals: the code writes SQL keywords in capitals and prose never is.
SQL_WORD = re.compile(
    r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|ALTER TABLE|SET LOCAL|WITH|FROM|WHERE|JOIN"
    r"|AND|OR|NOT|EXISTS|RETURNING|FOR (?:NO KEY )?UPDATE|FOR (?:KEY )?SHARE|CASE WHEN)\b"
)
STATEMENT = re.compile(
    r"\s*(SELECT|WITH|INSERT|UPDATE|DELETE|SET|ALTER|CREATE|DROP|LOCK|TRUNCATE|ANALYZE|VACUUM)\b"
)
PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")

INTRO = """\
# SQL catalogue

Every named SQL statement in Punctual's code, whole, as it is sent to
PostgreSQL: its name, the module that holds it, and the comment above it
there, which says which loop runs it, which race its guard stops and which
index it uses. A statement completed at run time (a claim's `{scope}`, a
dispatcher's `{shard}`) is shown once for each text the code fills in; a
part that statements are built from is shown as written, with the
statements that contain it.

This file is generated from the code by `tools/sql_catalogue.py`: do not
edit it. `make sql` regenerates it, and `make test` fails when it differs
from what the code builds.
"""


class CatalogueError(Exception):
    pass


@dataclass
class Entry:
    module: str  # path, e.g. runs/leases.py
    name: str
    line: int
    comment: str
    text: str
    # (label, SQL) for each variant; one, labelled with the name, if complete
    variants: list[tuple[str, str]] = field(default_factory=list)
    template: bool = False  # placeholders left for the code to fill
    part_of: list[str] = field(default_factory=list)

    @property
    def statement(self) -> bool:
        return bool(STATEMENT.match(self.text))


def product_packages(root: Path) -> list[str]:
    """The repository's top-level packages (directories with an
    ``__init__.py``), so that a new app is read without being named here."""
    return sorted(
        path.parent.name for path in root.glob("*/__init__.py") if path.parent.name not in SKIP_DIRS
    )


def module_paths(root: Path) -> list[Path]:
    """The product's modules, migrations and tests left out, and the Django
    settings modules too: they read the environment, and the test settings
    start a database server when imported."""
    paths = []
    for package in product_packages(root):
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if SKIP_DIRS.intersection(relative.parts[:-1]):
                continue
            if path.stem == "settings" or path.stem.startswith("settings_"):
                continue
            paths.append(relative)
    return paths


def constants(source: str) -> list[tuple[str, int, str]]:
    """(name, line, comment) of each module-level assignment to an UPPER_CASE
    name. The comment is the block of ``#`` lines just above it; an
    assignment without one that follows the previous statement with no
    blank line between shares that statement's comment (LOCK_SIMPLE_INTERVALS
    and DISPATCH_SIMPLE_INTERVALS are explained together)."""
    lines = source.splitlines()
    found = []
    previous: tuple[int, str] | None = None  # (end line, comment) of the last statement
    for node in ast.parse(source).body:
        comment = _comment_above(lines, node.lineno)
        if not comment and previous and previous[0] == node.lineno - 1:
            comment = previous[1]
        previous = (node.end_lineno or node.lineno, comment)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and NAME.fullmatch(target.id):
                found.append((target.id, node.lineno, comment))
    return found


def _comment_above(lines: list[str], line: int) -> str:
    """The block of ``#`` comment lines just above ``line`` (1-based), as text."""
    block: list[str] = []
    n = line - 2
    while n >= 0 and lines[n].lstrip().startswith("#"):
        block.insert(0, re.sub(r"^\s*# ?", "", lines[n]).rstrip())
        n -= 1
    return "\n".join(block)


def is_sql(name: str, value: object) -> bool:
    return isinstance(value, str) and (name.endswith("_SQL") or bool(SQL_WORD.search(value)))


def tidy(sql: str) -> str:
    """``sql`` without its common indentation, blank lines or trailing spaces."""
    lines = [line.rstrip() for line in sql.strip("\n").splitlines() if line.strip()]
    if len(lines) > 1 and lines[0] == lines[0].lstrip():
        rest = textwrap.dedent("\n".join(lines[1:])).splitlines()
        lines = [lines[0], *("    " + line if line else line for line in rest)]
    return textwrap.dedent("\n".join(lines)).strip("\n")


def _placeholders(module: ModuleType) -> dict[str, Placeholder]:
    """The module's Placeholders, by the name they fill (imported ones too)."""
    from core.sql import Placeholder

    declared: dict[str, Placeholder] = {}
    for value in vars(module).values():
        if isinstance(value, Placeholder):
            if value.name in declared and declared[value.name] is not value:
                raise CatalogueError(
                    f"{module.__name__}: two Placeholders for {{{value.name}}}; keep one"
                )
            declared[value.name] = value
    return declared


def _variants(entry: Entry, module: ModuleType) -> None:
    """Render ``entry`` once per combination of its placeholders' texts."""
    names = list(dict.fromkeys(PLACEHOLDER.findall(entry.text)))
    if not names:
        entry.variants = [(entry.name, entry.text)]
        return
    declared = _placeholders(module)
    missing = [n for n in names if n not in declared]
    if missing:
        # A template: the statements made from it are named, not it.
        entry.template = True
        entry.variants = [(entry.name, entry.text)]
        return
    for choice in itertools.product(*(declared[n].texts.items() for n in names)):
        label = ", ".join(f"{n}: {variant}" for n, (variant, _) in zip(names, choice, strict=True))
        text = entry.text.format(**{n: t for n, (_, t) in zip(names, choice, strict=True)})
        entry.variants.append((f"{entry.name} ({label})", text))


def _flat(sql: str) -> str:
    return " ".join(sql.split())


def _pattern(template: str) -> re.Pattern[str]:
    """A template's text, its placeholders standing for any text."""
    pieces = PLACEHOLDER.split(_flat(template))
    parts = [
        ".*?" if odd else re.escape(piece).replace(r"\ ", r"\s*")
        for odd, piece in zip(itertools.cycle((False, True)), pieces)
    ]
    return re.compile("".join(parts))


def _link_parts(entries: list[Entry]) -> None:
    """Name, for each entry, the other entries whose SQL contains its text."""
    rendered = [(e, [_flat(sql) for _, sql in e.variants]) for e in entries if not e.template]
    for entry in entries:
        pattern = _pattern(entry.text)
        for other, texts in rendered:
            if other is entry or not any(pattern.search(t) for t in texts):
                continue
            where = other.name if other.module == entry.module else f"{other.module} {other.name}"
            entry.part_of.append(where)
        if entry.template and not entry.part_of:
            raise CatalogueError(
                f"{entry.module}:{entry.line} {entry.name} has "
                + ", ".join("{" + n + "}" for n in PLACEHOLDER.findall(entry.text))
                + " and no statement is made from it: if the code fills it at run time,"
                " declare its texts with core.sql.Placeholder in that module"
            )


def collect(root: Path = ROOT) -> list[Entry]:
    """Every named statement of the product code, in module path, then line, order."""
    entries: list[Entry] = []
    for path in module_paths(root):
        source = (root / path).read_text(encoding="utf-8")
        found = constants(source)
        if not found:
            continue
        dotted = ".".join(path.with_suffix("").parts)
        module = importlib.import_module(dotted.removesuffix(".__init__"))
        for name, line, comment in found:
            value = getattr(module, name, None)
            if not is_sql(name, value):
                continue
            assert isinstance(value, str)
            entry = Entry(path.as_posix(), name, line, comment, value)
            _variants(entry, module)
            entries.append(entry)
    _link_parts(entries)
    return entries


def _markdown_comment(comment: str) -> str:
    """The comment as Markdown: a list item after a line of prose starts a
    list (Markdown needs a blank line there)."""
    out: list[str] = []
    for line in comment.splitlines():
        item = line.startswith("- ")
        if item and out and out[-1] and not out[-1].startswith(("- ", "  ")):
            out.append("")
        out.append(line)
    return "\n".join(out)


def render(entries: list[Entry]) -> str:
    parts = [INTRO]
    for module, group in itertools.groupby(entries, key=lambda e: e.module):
        parts.append(f"## {module}\n")
        for entry in group:
            parts.append(f"### {entry.name}\n")
            within = ", ".join(f"`{name}`" for name in entry.part_of)
            if entry.template:
                parts.append(f"A template: filled in, a part of {within}.\n")
            elif not entry.statement:
                parts.append(f"A part of {within}.\n" if within else "A part of statements.\n")
            elif within:
                parts.append(f"Also a part of {within}.\n")
            if entry.comment:
                parts.append(_markdown_comment(entry.comment) + "\n")
            for label, sql in entry.variants:
                if label != entry.name:
                    parts.append(f"`{label}`\n")
                parts.append(f"```sql\n{tidy(sql)}\n```\n")
    return "\n".join(parts)


def build(root: Path = ROOT) -> str:
    return render(collect(root))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    args = parser.parse_args(argv[1:])
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_site.settings_typecheck")
    os.environ.setdefault("SECRET_KEY", "sql-catalogue")
    import django

    django.setup()
    try:
        text = build()
    except CatalogueError as exc:
        print(f"sql_catalogue: {exc}", file=sys.stderr)
        return 2
    path = ROOT / OUTPUT
    if args.check:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is out of date with the code: run `make sql`", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"{OUTPUT}: {text.count('```sql')} SQL blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

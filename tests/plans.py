"""What a hot statement's plan must look like, checked without a clock.

``explaining()`` watches every statement Django's connection sends while it
is open (an execute wrapper, so a statement is seen exactly as the code sends
it, parameters included). For each one it asks, in the statement's own
transaction and just before it runs:

- ``SHOW jit``: off, for the session (a direct connection) or for the hot
  transaction (behind a transaction pooler: core/db.py NO_JIT);
- ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` of the statement, inside a
  savepoint (or, in autocommit, a transaction) that is rolled back, so the
  statement then runs once, as sent.

``problems()`` names what is wrong with the plans: ``jit`` on, a JIT section
(with ``jit_above_cost = 0``, which ``jit_everywhere()`` sets, any statement
planned with JIT on has one), a node priced at 1e9 or more (before
PostgreSQL 18 a disabled node costs 1e10), or a node PostgreSQL 18 marks
disabled. The same checks hold on every server: the embedded 18, which has
no JIT, and Debian's 15, which has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

# A node priced this high was disabled (enable_* = off adds 1e10 to it before
# PostgreSQL 18); no plan of a hot statement comes near it.
DISABLED_COST = 1e9

# Statements that set up or end a transaction rather than do its work.
_BOOKKEEPING = ("SET ", "SHOW ", "SAVEPOINT", "RELEASE ", "ROLLBACK")


@dataclass
class Explained:
    sql: str
    in_transaction: bool
    jit: str = ""
    plan: dict[str, Any] = field(default_factory=dict)

    @property
    def buffers(self) -> int:
        """Shared buffers the statement's execution touched (hit or read)."""
        top = self.plan.get("Plan", {})
        return int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))

    @property
    def rows_handled(self) -> int:
        """Rows that the plan's nodes produced, each node's rows times its
        loops, summed: the executor's work, counted rather than timed. A
        nested loop that scans a whole batch again for every row it joins
        (a Join Filter where an index lookup or a hash was meant) handles
        the batch's square."""
        return int(
            sum(
                node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
                for node in _nodes(self.plan.get("Plan", {}))
            )
        )

    def scans_of(self, relation: str) -> list[str]:
        """The scans that read ``relation`` (a table's name, as the plan
        names it), in plan order: "Tid Scan", "Seq Scan", ..."""
        return [
            node["Node Type"]
            for node in _nodes(self.plan.get("Plan", {}))
            if node.get("Relation Name") == relation and node["Node Type"].endswith("Scan")
        ]

    def indexes_read(self) -> set[str]:
        """The indexes the plan reads, by name, whatever the scan."""
        return {
            node["Index Name"] for node in _nodes(self.plan.get("Plan", {})) if "Index Name" in node
        }

    def relations_read(self, prefix: str, under: str = "") -> set[str]:
        """The tables (partitions) whose name starts with ``prefix`` that the
        plan reads, in the whole plan or in the subplan named ``under``
        ("CTE due"), whatever the scan: a Bitmap Index Scan's table is named
        by the Bitmap Heap Scan above it."""
        top = self.plan.get("Plan", {})
        if under:
            (top,) = [n for n in _nodes(top) if n.get("Subplan Name") == under]
        return {
            node["Relation Name"]
            for node in _nodes(top)
            if node.get("Relation Name", "").startswith(prefix)
        }

    def problems(self) -> list[str]:
        head = " ".join(self.sql.split())[:90]
        found = []
        if self.jit != "off":
            found.append(f"jit is {self.jit!r}: {head}")
        if "JIT" in self.plan:
            found.append(f"JIT-compiled ({self.plan['JIT'].get('Functions')} functions): {head}")
        for node in _nodes(self.plan.get("Plan", {})):
            if node.get("Total Cost", 0) >= DISABLED_COST:
                found.append(f"{node['Node Type']} costs {node['Total Cost']:.0f}: {head}")
            if node.get("Disabled"):
                found.append(f"{node['Node Type']} is disabled: {head}")
        return found


def _nodes(node: dict) -> Iterator[dict]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _value(row: Any) -> Any:
    """The first column of a row, whatever the cursor's row factory."""
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


@contextmanager
def explaining(watch: Callable[[str], bool] = lambda sql: True) -> Iterator[list[Explained]]:
    """Every statement ``watch`` accepts, explained as sent (see the module)."""
    seen: list[Explained] = []

    def wrapper(execute, sql, params, many, context):
        text = sql.lstrip()
        if many or text.upper().startswith(_BOOKKEEPING) or not watch(sql):
            return execute(sql, params, many, context)
        record = Explained(sql=sql, in_transaction=connection.in_atomic_block)
        seen.append(record)
        # The statement's own psycopg cursor (its binding, its row factory),
        # under Django's wrapper; the statement itself runs on it next, so
        # nothing is left behind.
        cur = context["cursor"].cursor
        cur.execute("SHOW jit")
        record.jit = _value(cur.fetchone())
        begin, end = (
            ("SAVEPOINT explain_hot", "ROLLBACK TO SAVEPOINT explain_hot")
            if record.in_transaction
            else ("BEGIN", "ROLLBACK")
        )
        cur.execute(begin)
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        record.plan = _value(cur.fetchone())[0]
        cur.execute(end)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen


@contextmanager
def jit_everywhere() -> Iterator[None]:
    """This connection plans every statement for JIT (``jit_above_cost = 0``)
    where its transaction leaves ``jit`` on; reset afterwards."""
    with connection.cursor() as cur:
        cur.execute("SET jit_above_cost = 0")
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET jit_above_cost")


def server() -> dict[str, Any]:
    """The session's server: its major version and whether it has JIT
    (``pg_jit_available()`` answers false while ``jit`` is off, as Punctual's
    sessions have it: asked with it on, for one transaction)."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL jit = on")
        cur.execute("SELECT current_setting('server_version_num')::int, pg_jit_available()")
        version, jit = cur.fetchone()
    return {"major": version // 10000, "jit_available": jit}

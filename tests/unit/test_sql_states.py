"""The states the SQL spells as literals are the enums' states.

The hot statements compare and set ``runs_run.state`` and ``jobs_job.state``
as SQL literals ('running', 'pending', ...) beside ``RunState`` and
``JobState``; a misspelt or stale one is no error to PostgreSQL, only a
statement that never matches. Every named statement, rendered whole as the
catalogue of SQL renders it (tools/sql_catalogue.py), is searched for state
literals in each form the code writes them, and each is checked against the
enum of its table: ``runs_run`` (and its partitions) RunState, ``jobs_job``
JobState, ``jobs_schedulespan`` SpanState, ``alerts_alert`` AlertState. A state whose table the
statement does not say (a CTE's column, an unqualified column of a
statement that reads several tables) must be a state of one of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.models import AlertState
from jobs.models import JobState, SpanState
from runs.models import RunState
from tools import sql_catalogue

ROOT = Path(__file__).resolve().parents[2]

STATES = {
    "runs_run": set(RunState),
    "jobs_job": set(JobState),
    "jobs_schedulespan": set(SpanState),
    "alerts_alert": set(AlertState),
}
ANY_STATE = set().union(*STATES.values())
TABLE = r"\b(runs_run\w*|jobs_job|jobs_schedulespan|alerts_alert)\b"
COLUMN = r"(?:\b([a-z_]\w*)\.)?\bstate\b"
LITERAL = re.compile(r"'([^']*)'")
RESULT = re.compile(r"\b(?:THEN|ELSE)\s+'([^']*)'")


def _table(name: str) -> str:
    """A partition of runs_run is runs_run (runs_run_default, runs_run_p20261201)."""
    return "runs_run" if name.startswith("runs_run") else name


def _aliases(sql: str) -> dict[str, str | None]:
    """alias -> its table; None for an alias of anything else, or of two
    things in one statement (``s``: a span, and an unnest's rows)."""
    found: dict[str, set[str]] = {}
    for m in re.finditer(TABLE + r"(?:\s+AS)?\s+([a-z_]\w*)\b(?!\s*\()", sql):
        found.setdefault(m.group(2), set()).add(_table(m.group(1)))
    for m in re.finditer(r"(?<!\w)(\w+\)?)\s+AS\s+([a-z_]\w*)", sql):
        if not re.fullmatch(TABLE, m.group(1)):
            found.setdefault(m.group(2), set()).add("")
    return {
        alias: (tables.pop() or None if len(tables) == 1 else None)
        for alias, tables in found.items()
    }


def _select_list(sql: str, start: int) -> list[str]:
    """The expressions of the select list that starts at ``start``, split at
    the commas outside parentheses, up to its FROM."""
    items, depth, item = [], 0, ""
    for token in re.findall(r"'[^']*'|\(|\)|,|\bFROM\b|[^'(),F]+|F", sql[start:]):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0 and token == ",":
            items.append(item)
            item = ""
            continue
        elif depth == 0 and token == "FROM":
            break
        item += token
    return [*items, item]


# Each form a state literal takes beside its column: (the pattern, its
# alias in group 1 and the text holding the literals in group 2, and how to
# read the literals out of that text).
WHEN = re.compile(r"\bWHEN\s+'([^']*)'")
FORMS = (
    (re.compile(COLUMN + r"\s*(?:=|<>|!=)\s*('[^']*')"), LITERAL),  # r.state = 'x'
    (re.compile(COLUMN + r"\s+(?:NOT\s+)?IN\s*\(([^()]*)\)"), LITERAL),  # state IN ('x', 'y')
    (re.compile(COLUMN + r"\s*=\s*CASE\b(.*?)\bEND\b"), RESULT),  # state = CASE ... THEN 'x'
    (re.compile(r"\bCASE\s+" + COLUMN + r"(.*?)\bEND\b"), WHEN),  # CASE r.state WHEN 'x'
)
NAMED = re.compile(r"\bCASE\b((?:(?!\bCASE\b).)*?)\bEND\s+AS\s+state\b")
INSERTED = re.compile(r"\bINSERT INTO " + TABLE + r"\s*\(([^()]*)\)\s*SELECT\b")
SET_LIST = re.compile(
    r"\bUPDATE " + TABLE + r"(?: AS \w+)? SET\b(.*?)(?=\bFROM\b|\bWHERE\b|\bRETURNING\b|$)"
)


def _resolver(sql: str):
    """The table of a matched column: its alias's, the updated table's for a
    bare ``state`` in an UPDATE's SET list, or the statement's one table."""
    aliases = _aliases(sql)
    tables = {_table(t) for t in re.findall(TABLE, sql)}
    updates = [(m.start(2), m.end(2), _table(m.group(1))) for m in SET_LIST.finditer(sql)]

    def table(m: re.Match[str]) -> str | None:
        if m.group(1) is not None:
            return aliases.get(m.group(1))
        for start, end, updated in updates:
            if start <= m.start() < end:
                return updated
        return next(iter(tables)) if len(tables) == 1 else None

    return table


def _inserted(sql: str) -> Iterator[tuple[str | None, str]]:
    """The states an ``INSERT INTO runs_run (..., state, ...) SELECT`` writes."""
    for m in INSERTED.finditer(sql):
        columns = [c.strip() for c in m.group(2).split(",")]
        values = _select_list(sql, m.end())
        if "state" in columns and len(values) == len(columns):
            value = values[columns.index("state")]
            for state in RESULT.findall(value) or LITERAL.findall(value.strip()):
                yield _table(m.group(1)), state


def state_literals(sql: str) -> Iterator[tuple[str | None, str]]:
    """(table or None, state) for every state literal of ``sql``: compared
    (``r.state = 'x'``, ``<>``, ``[NOT] IN (...)``), set (``SET state =
    'x'``, ``state = CASE ... THEN 'x' ... END``), matched
    (``CASE r.state WHEN 'x'``), named (``CASE ... END AS state``) or
    inserted (``INSERT INTO runs_run (..., state, ...) SELECT ...``)."""
    sql = " ".join(sql.split())
    table = _resolver(sql)
    for form, literals in FORMS:
        for m in form.finditer(sql):
            for state in literals.findall(m.group(2)):
                yield table(m), state
    for m in NAMED.finditer(sql):
        for state in RESULT.findall(m.group(1)):
            yield None, state
    yield from _inserted(sql)


def wrong_states(sql: str) -> list[str]:
    """A line for each state literal of ``sql`` that is no state of its table."""
    wrong = []
    for table, state in state_literals(sql):
        allowed = STATES[table] if table else ANY_STATE
        if state not in allowed:
            where = f"a state of {table}" if table else "a run, job or span state"
            wrong.append(f"'{state}' is not {where} ({', '.join(sorted(allowed))})")
    return wrong


def statements() -> Iterator[tuple[str, str]]:
    for entry in sql_catalogue.collect(ROOT):
        if not entry.template:
            for label, sql in entry.variants:
                yield f"{entry.module} {label}", sql


def test_every_state_literal_in_the_sql_is_a_state_of_its_table():
    wrong = [f"{label}: {problem}" for label, sql in statements() for problem in wrong_states(sql)]
    assert not wrong, "\n".join(wrong)


def test_the_states_are_found_where_the_hot_statements_spell_them():
    found: dict[str, set[tuple[str | None, str]]] = {}
    for label, sql in statements():
        found[label] = set(state_literals(sql))
    assert found["runs/leases.py CLAIM_EXPIRED (scope: any owner)"] >= {
        ("runs_run", "running"),
        ("jobs_job", "active"),
    }
    assert ("runs_run", "retrying") in found["runs/leases.py RELEASE"]
    assert found["runs/outcomes.py CANCEL_STOPPED"] >= {
        ("runs_run", "pending"),
        ("runs_run", "cancelled"),
        ("jobs_job", "active"),
    }
    assert found["dispatch/queries.py DISPATCH_SIMPLE_INTERVALS"] >= {
        ("runs_run", "skipped"),
        ("runs_run", "pending"),
    }
    assert ("jobs_schedulespan", "paused") in found["ops/audit.py _STOP_SPANS"]
    every = set().union(*found.values())
    assert {state for table, state in every if table == "runs_run"} >= {
        "pending",
        "running",
        "retrying",
        "failed",
        "cancelled",
        "skipped",
    }


@pytest.mark.parametrize(
    "sql, wrong",
    [
        ("UPDATE runs_run AS r SET state = 'runing' WHERE r.id = %s", ["'runing' is not"]),
        ("SELECT 1 FROM runs_run AS e WHERE e.state IN ('pending', 'retried')", ["'retried'"]),
        ("SELECT 1 FROM jobs_job AS j WHERE j.state <> 'running'", ["'running' is not a state"]),
        ("SELECT count(*) FILTER (WHERE state = 'done') FROM runs_run", ["'done'"]),
        (
            "UPDATE runs_run AS r SET state = CASE WHEN w.x THEN 'canceled' ELSE w.state END",
            ["'canceled'"],
        ),
        ("SELECT CASE r.state WHEN 'sucess' THEN 1 END FROM runs_run AS r", ["'sucess'"]),
        (
            "INSERT INTO runs_run (id, state) SELECT f.id, CASE WHEN f.s THEN 'skiped' END FROM f",
            ["'skiped'"],
        ),
        ("WITH s AS (SELECT 1) SELECT 1 FROM s WHERE s.state = 'gone'", ["'gone' is not a run"]),
        ("UPDATE runs_run AS r SET state = 'running' WHERE r.state IN ('pending')", []),
        ("SELECT 1 FROM jobs_schedulespan AS s WHERE s.state IN ('paused', 'deleted')", []),
    ],
)
def test_a_misspelt_or_misplaced_state_is_found_in_each_form(sql, wrong):
    problems = wrong_states(sql)
    assert len(problems) == len(wrong), problems
    for problem, expected in zip(problems, wrong, strict=True):
        assert expected in problem

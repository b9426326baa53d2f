"""One list of the columns a new run is written with: runs/models.py
RUN_COLUMNS. Every insert of runs, in SQL or through the ORM, writes those
columns in that order, so a column added to runs is added to the list and
then given its value in each insert, and none can be forgotten."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import uuid
from pathlib import Path

import pytest

from jobs.models import Job
from runs.models import RUN_COLUMNS, Run, RunKind
from tools import sql_catalogue

ROOT = Path(__file__).resolve().parents[2]
T0 = Run._meta.get_field("scheduled_at").to_python("2026-12-01T10:00:00Z")


def test_every_run_column_is_a_column_of_runs():
    columns = [f.column for f in Run._meta.concrete_fields]
    assert set(RUN_COLUMNS) <= set(columns)
    assert len(set(RUN_COLUMNS)) == len(RUN_COLUMNS)


def test_every_named_insert_of_runs_writes_the_run_columns_first():
    inserts = []
    for entry in sql_catalogue.collect(ROOT):
        for label, sql in entry.variants:
            flat = " ".join(sql.split())
            for columns in re.findall(r"\bINSERT INTO runs_run\w* \(([^()]*)\)", flat):
                inserts.append(label)
                named = [c.strip() for c in columns.split(",")]
                assert tuple(named[: len(RUN_COLUMNS)]) == RUN_COLUMNS, label
    assert {"INSERT_RUNS_AND_ADVANCE", "DISPATCH_SIMPLE_INTERVALS"} <= set(inserts)
    assert any(label.startswith("HISTORY_RUNS") for label in inserts)


def test_every_insert_of_runs_in_the_code_formats_the_run_columns_in():
    """Statements that are not named too (the bench's audit data)."""
    found = 0
    for path in sql_catalogue.module_paths(ROOT):
        for line in (ROOT / path).read_text(encoding="utf-8").splitlines():
            m = re.search(r"INSERT INTO runs_run\b.*", line)
            if m is None or line.lstrip().startswith("#"):
                continue
            found += 1
            assert m.group(0).startswith("INSERT INTO runs_run ({RUN_COLUMNS_SQL}"), (
                f"{path}: {m.group(0)}: name the columns with runs.models.RUN_COLUMNS_SQL"
            )
    assert found >= 3


def test_the_orm_builds_a_run_with_each_run_column_in_order():
    source = textwrap.dedent(inspect.getsource(Run.for_job))
    call = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "cls"
    )
    keywords = ["job_id" if k.arg == "job" else k.arg for k in call.keywords]
    # created_at is the insert's: Django sets it as it saves the row.
    assert Run._meta.get_field("created_at").auto_now_add  # type: ignore[union-attr]
    assert tuple(keywords) == tuple(c for c in RUN_COLUMNS if c != "created_at")


@pytest.mark.parametrize(
    "overlap_policy, exclusive", [("skip", True), ("queue", True), ("allow", False)]
)
def test_a_run_takes_its_copies_of_the_job(overlap_policy, exclusive):
    job = Job(
        id=uuid.uuid4(),
        owner_id=42,
        max_attempts=7,
        target_kind="pull",
        overlap_policy=overlap_policy,
    )
    run = Run.for_job(
        job, id=uuid.uuid4(), scheduled_at=T0, kind=RunKind.SCHEDULED, available_at=T0
    )
    assert (run.job_id, run.max_attempts, run.target_kind, run.exclusive, run.owner_id) == (
        job.pk,
        7,
        "pull",
        exclusive,
        42,
    )
    assert (run.state, run.reason, run.attempt, run.lease_owner, run.last_error) == (
        "pending",
        "",
        0,
        "",
        "",
    )
    test = Run.for_job(
        job, id=uuid.uuid4(), scheduled_at=T0, kind=RunKind.TEST, available_at=T0, max_attempts=1
    )
    assert test.max_attempts == 1

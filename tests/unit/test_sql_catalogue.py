"""docs/reference/sql.md is the catalogue of every named SQL statement, built
from the code by tools/sql_catalogue.py (``make sql``). As with
``makemigrations --check``, the suite fails when the checked-in file is not
what the code builds."""

from __future__ import annotations

import re
import textwrap
import uuid
from pathlib import Path

import pytest

from tools import sql_catalogue

ROOT = Path(__file__).resolve().parents[2]


def test_the_checked_in_catalogue_is_what_the_code_builds():
    built = sql_catalogue.build(ROOT)
    path = ROOT / sql_catalogue.OUTPUT
    checked_in = path.read_text(encoding="utf-8") if path.exists() else ""
    assert checked_in == built, (
        f"{sql_catalogue.OUTPUT} is out of date with the code's SQL: run `make sql` "
        "and commit the file"
    )


def test_every_statement_is_rendered_whole_with_each_variant_the_code_sends():
    entries = {(e.module, e.name): e for e in sql_catalogue.collect(ROOT)}
    for entry in entries.values():
        if entry.template:
            continue
        for label, sql in entry.variants:
            assert not sql_catalogue.PLACEHOLDER.search(sql), label
    claim = entries["runs/leases.py", "CLAIM_WAITING"]
    assert [label for label, _ in claim.variants] == [
        "CLAIM_WAITING (scope: any owner)",
        "CLAIM_WAITING (scope: pull owner)",
        "CLAIM_WAITING (scope: pull owner, one job)",
    ]
    # Six fragments, one text: what the worker sends.
    assert "AND j.deleted_at IS NULL AND (j.state = 'active'" in claim.variants[0][1]
    assert "FOR UPDATE OF r SKIP LOCKED FOR KEY SHARE OF j SKIP LOCKED" in claim.variants[0][1]
    assert "Worker claim loop" in claim.comment


def _package(tmp_path: Path, monkeypatch, source: str) -> str:
    """A throwaway product package under ``tmp_path`` holding ``source`` as
    its module ``queries``; returns the package's name."""
    name = f"sqlfixture_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "queries.py").write_text(textwrap.dedent(source))
    (tmp_path / name / "migrations").mkdir()
    (tmp_path / name / "migrations" / "__init__.py").write_text("")
    (tmp_path / name / "migrations" / "0001.py").write_text('SKIPPED = "SELECT 1"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_statement_built_from_parts_and_completed_at_run_time_is_shown_whole(
    tmp_path, monkeypatch
):
    name = _package(
        tmp_path,
        monkeypatch,
        """
        from core.sql import Placeholder

        MESSAGE = "Not SQL, and left out."

        # Live jobs only.
        LIVE = "AND j.state = 'active'"

        # The due jobs, oldest first.
        DUE = (
            "SELECT id FROM jobs_job AS j WHERE j.next_fire_at <= %(now)s "
            + LIVE
            + " {shard} ORDER BY j.next_fire_at"
        )
        SHARD = Placeholder("shard", {"every job": "", "one shard": "AND j.shard = %(shard)s"})
        """,
    )
    text = sql_catalogue.render(sql_catalogue.collect(tmp_path))
    assert f"## {name}/queries.py" in text
    assert "MESSAGE" not in text and "SKIPPED" not in text
    assert "### LIVE\n\nA part of `DUE`.\n\nLive jobs only." in text
    assert "### DUE\n\nThe due jobs, oldest first.\n\n`DUE (shard: every job)`" in text
    assert (
        "SELECT id FROM jobs_job AS j WHERE j.next_fire_at <= %(now)s AND j.state = 'active'"
        " AND j.shard = %(shard)s ORDER BY j.next_fire_at\n```" in text
    )
    assert text.index("### LIVE") < text.index("### DUE")


def test_a_placeholder_filled_at_run_time_must_be_declared(tmp_path, monkeypatch):
    _package(
        tmp_path,
        monkeypatch,
        """
        # The code fills {scope}, but no Placeholder says with what.
        CLAIM = "SELECT id FROM runs_run WHERE state = 'pending' {scope}"
        """,
    )
    with pytest.raises(sql_catalogue.CatalogueError, match=re.escape("CLAIM has {scope}")):
        sql_catalogue.collect(tmp_path)

"""Every partition of runs_run records job_id's distinct values as a hundredth
of its rows at ANALYZE (runs/partitions.py JOB_ID_DISTINCT says why: a
partition holding one job's runs made every claim scan it once per waiting
run). New day partitions get the option when they are made; this sets it on
the partitions that exist, and analyses again the ones already analysed, so
that it holds from now on rather than from their next automatic ANALYZE."""

from django.db import migrations

PARTITIONS = """
    SELECT c.relname AS name,
           EXISTS (SELECT 1 FROM pg_stats AS s
                   WHERE s.schemaname = current_schema() AND s.tablename = c.relname
                     AND s.attname = 'job_id') AS analysed
    FROM pg_inherits AS i
    JOIN pg_class AS c ON c.oid = i.inhrelid
    JOIN pg_class AS p ON p.oid = i.inhparent
    WHERE p.relname = 'runs_run'
    ORDER BY c.relname
"""


def _partitions(cur) -> list[tuple[str, bool]]:
    cur.execute(PARTITIONS)
    return cur.fetchall()


def set_distinct(apps, schema_editor):
    with schema_editor.connection.cursor() as cur:
        for name, analysed in _partitions(cur):
            cur.execute(f'ALTER TABLE "{name}" ALTER COLUMN job_id SET (n_distinct = -0.01)')
            if analysed:
                cur.execute(f'ANALYZE "{name}"')


def reset_distinct(apps, schema_editor):
    with schema_editor.connection.cursor() as cur:
        for name, _ in _partitions(cur):
            cur.execute(f'ALTER TABLE "{name}" ALTER COLUMN job_id RESET (n_distinct)')


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0009_run_kind_test_delivery"),
    ]

    operations = [
        migrations.RunPython(set_distinct, reset_distinct),
    ]

"""Earlier versions kept API keys in plain text, in the table of DRF's
``rest_framework.authtoken`` app. This migration stores each key's SHA-256
digest as a live ``ApiToken`` (so clients keep their key), then drops that
table, so that no plain key stays in the database.

The authtoken app is no longer installed, so this reads its table by name,
and does nothing on a database that never had it. Not reversible: the plain
keys are gone.
"""

import hashlib

from django.db import migrations

PREFIX_LENGTH = 12  # accounts.tokens.PREFIX_LENGTH, frozen here


def convert_authtoken_keys(cursor) -> int:
    """Copy every authtoken key as a digest, drop the table; the number copied."""
    cursor.execute("SELECT to_regclass('authtoken_token') IS NOT NULL")
    if not cursor.fetchone()[0]:
        return 0
    cursor.execute("SELECT key, user_id, created FROM authtoken_token")
    rows = [
        (key[:PREFIX_LENGTH], hashlib.sha256(key.encode()).hexdigest(), created, user_id)
        for key, user_id, created in cursor.fetchall()
    ]
    if rows:
        cursor.executemany(
            "INSERT INTO accounts_apitoken (prefix, digest, created_at, user_id, retired_because)"
            " VALUES (%s, %s, %s, %s, '')",
            rows,
        )
    cursor.execute("DROP TABLE authtoken_token CASCADE")
    return len(rows)


def forwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        convert_authtoken_keys(cursor)


class Migration(migrations.Migration):

    dependencies = [("accounts", "0002_shared_cache_table")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]

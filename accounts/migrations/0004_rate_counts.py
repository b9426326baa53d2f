"""The API's rate-limit counters move from Django's database cache (the
``punctual_cache`` table, a read and a write with a commit per counted
request) to ``punctual_rate_counts``: one atomic upsert per request, on an
UNLOGGED table, whose writes skip the write-ahead log and so never wait for
a disk flush (accounts/throttles.py).

UNLOGGED means a crash empties the table, and a promoted standby starts
with it empty: every client then starts a fresh window, which is all the
table holds.

The old cache table stays: during a rolling upgrade
(docs/operating/upgrades.md) the web processes of the previous version still count in it
until they are restarted, and this migration must not break them. Nothing
reads it any more; a later release drops it.
"""

from django.db import migrations

CREATE = """
CREATE UNLOGGED TABLE punctual_rate_counts (
    key text PRIMARY KEY,
    window_ends timestamp with time zone NOT NULL,
    hits integer NOT NULL CHECK (hits > 0)
);
-- The dispatcher's prune of the windows that have ended (throttles.prune).
CREATE INDEX punctual_rate_counts_window_ends ON punctual_rate_counts (window_ends);
"""

REVERSE = "DROP TABLE IF EXISTS punctual_rate_counts"


class Migration(migrations.Migration):

    dependencies = [("accounts", "0003_hash_authtoken_keys")]

    operations = [migrations.RunSQL(CREATE, reverse_sql=REVERSE)]

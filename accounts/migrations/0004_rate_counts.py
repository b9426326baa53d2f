"""The API's rate-limit counters move from Django's database cache (the
``punctual_cache`` table, a read and a write with a commit per counted
request) to ``punctual_rate_counts``: one atomic upsert per request, on an
UNLOGGED table, whose writes skip the write-ahead log and so never wait for
a disk flush (accounts/throttles.py).

UNLOGGED means a crash empties the table, and a promoted standby starts
with it empty: every client then starts a fresh window, which is all the
table holds. The cache table it replaces is dropped.
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
DROP TABLE IF EXISTS punctual_cache;
"""

REVERSE = """
DROP TABLE IF EXISTS punctual_rate_counts;
CREATE TABLE IF NOT EXISTS punctual_cache (
    cache_key varchar(255) NOT NULL PRIMARY KEY,
    value text NOT NULL,
    expires timestamp with time zone NOT NULL
);
CREATE INDEX IF NOT EXISTS punctual_cache_expires ON punctual_cache (expires);
"""


class Migration(migrations.Migration):

    dependencies = [("accounts", "0003_hash_authtoken_keys")]

    operations = [migrations.RunSQL(CREATE, reverse_sql=REVERSE)]

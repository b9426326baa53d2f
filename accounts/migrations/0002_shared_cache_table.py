"""The table of the default cache (``PUNCTUAL_CACHE_URL``'s default,
``dbcache://punctual_cache``), where the API's rate-limit counters live, so
that ``migrate`` is all an install needs.

The columns are those ``manage.py createcachetable`` makes for Django's
DatabaseCache. ``IF NOT EXISTS``: an install that ran createcachetable
before keeps its table.
"""

from django.db import migrations

CREATE = """
CREATE TABLE IF NOT EXISTS punctual_cache (
    cache_key varchar(255) NOT NULL PRIMARY KEY,
    value text NOT NULL,
    expires timestamp with time zone NOT NULL
);
CREATE INDEX IF NOT EXISTS punctual_cache_expires ON punctual_cache (expires);
"""


class Migration(migrations.Migration):

    dependencies = [("accounts", "0001_api_token")]

    operations = [migrations.RunSQL(CREATE, reverse_sql="DROP TABLE IF EXISTS punctual_cache")]

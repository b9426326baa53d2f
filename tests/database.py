"""The test database as a ``DATABASE_URL``, for the processes that tests start."""

from __future__ import annotations

from urllib.parse import quote

from django.db import connection


def subprocess_database_url() -> str:
    """The URL of the database this test process uses (pytest-django's test
    database on the session's server). A socket directory as the host is
    percent-encoded, as the settings expect."""
    db = connection.settings_dict
    user = quote(db["USER"] or "postgres", safe="")
    password = quote(db["PASSWORD"] or "", safe="")
    auth = f"{user}:{password}@" if password else f"{user}@"
    host = db["HOST"] or "127.0.0.1"
    if host.startswith("/"):
        return f"postgres://{auth}{quote(host, safe='')}/{db['NAME']}"
    return f"postgres://{auth}{host}:{db['PORT'] or 5432}/{db['NAME']}"

"""The test database as a ``DATABASE_URL``, for the processes that tests start."""

from __future__ import annotations

from itertools import zip_longest
from urllib.parse import quote, urlencode

from django.db import connection

# Options that Django hands psycopg rather than libpq.
PSYCOPG_OPTIONS = {"prepare_threshold", "server_side_binding", "isolation_level", "pool"}


def subprocess_database_url() -> str:
    """The URL of the database this test process uses (pytest-django's test
    database on the session's server), hosts, ports and options included: a
    socket directory as a host is percent-encoded, as the settings expect,
    and several hosts are listed in libpq's multi-host form."""
    db = connection.settings_dict
    user = quote(db["USER"] or "postgres", safe="")
    password = quote(db["PASSWORD"] or "", safe="")
    auth = f"{user}:{password}@" if password else f"{user}@"
    hosts = (db["HOST"] or "127.0.0.1").split(",")
    ports = str(db["PORT"] or "").split(",")
    if len(ports) == 1:  # one port (or none) for every host
        ports = ports * len(hosts)
    netloc = ",".join(_host(host, port) for host, port in zip_longest(hosts, ports, fillvalue=""))
    # libpq's parameters only: psycopg's prepare_threshold is the settings'
    # own choice, which the process makes again from its environment.
    libpq = {k: v for k, v in db.get("OPTIONS", {}).items() if k not in PSYCOPG_OPTIONS}
    options = f"?{urlencode(libpq, quote_via=quote)}" if libpq else ""
    return f"postgres://{auth}{netloc}/{db['NAME']}{options}"


def _host(host: str, port: str) -> str:
    if host.startswith("/"):
        return quote(host, safe="")
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port or 5432}"

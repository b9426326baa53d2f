"""``DATABASE_URL`` to Django's database settings, including libpq's multi-host form.

A highly available PostgreSQL has a primary and one or more standbys, and the
primary can move (docs/operating/high-availability.md). libpq finds the
current primary itself when it is given every host and told what to look for::

    postgresql://punctual@db1:5432,db2:5432/punctual?target_session_attrs=read-write
    postgres://postgres@%2Fsrv%2Fpg1,%2Fsrv%2Fpg2/punctual?target_session_attrs=read-write

(a Unix socket directory as a host is percent-encoded). It tries the hosts in
turn and keeps the first one that accepts writes, so every new connection of
every process goes to whichever host is the primary now; the processes
already open a new connection after any database error.

django-environ parses the URL. For a host list it joins the hosts into
``HOST`` ("db1,db2") but keeps only the ports that were written, which libpq
would then apply to the wrong hosts ("db1,db2:5433" would send db1 to 5433
too), and it keeps IPv6 brackets that libpq does not read. ``HOST`` and
``PORT`` are therefore made here from the URL's host list, one port per host
(an empty entry is libpq's default port). The query parameters pass through
to libpq as ``OPTIONS``.

Punctual writes on every path, so a URL that lists several hosts must say
``target_session_attrs=read-write`` (or ``primary``): without it libpq takes
the first host that answers, which may be a read-only standby.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import environ

POSTGRESQL = "django.db.backends.postgresql"
# Django's PostgreSQL backend with a health check that costs no round trip
# while the connection is sound (core/postgresql/base.py).
BACKEND = "core.postgresql"
# target_session_attrs values that find a host which accepts writes.
WRITABLE = ("read-write", "primary")


def database_settings(url: str, variable: str = "DATABASE_URL") -> dict:
    """Django's ``DATABASES`` entry for ``url``, read from the environment
    ``variable``; ImproperlyConfigured names the variable and what is wrong."""
    config = environ.Env.db_url_config(url) if "://" in url else {}
    if config.get("ENGINE") != POSTGRESQL:
        raise environ.ImproperlyConfigured(
            f"{variable} must name a PostgreSQL server (postgres://...): Punctual relies on"
            " row locks, partial unique indexes and the database clock that only PostgreSQL has"
        )
    config["ENGINE"] = BACKEND
    hosts, ports = host_list(url)
    if hosts:  # else a socket in the path, or host= among the parameters
        config["HOST"] = ",".join(hosts)
        config["PORT"] = ",".join(ports) if any(ports) else ""
    attrs = config.get("OPTIONS", {}).get("target_session_attrs")
    if attrs not in (None, "any", *WRITABLE):
        raise environ.ImproperlyConfigured(
            f"{variable}: target_session_attrs={attrs} would connect to a server that may"
            " refuse writes; use read-write or primary"
        )
    if len(hosts) > 1 and attrs not in WRITABLE:
        raise environ.ImproperlyConfigured(
            f"{variable} lists several hosts: add ?target_session_attrs=read-write so that"
            " every connection goes to the primary, never to a read-only standby"
        )
    return config


def host_list(url: str) -> tuple[list[str], list[str]]:
    """The hosts of ``url`` and a port for each ("" for the default port),
    as libpq's ``host`` and ``port`` lists take them: socket directories
    decoded, IPv6 addresses without their brackets."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    hosts, ports = [], []
    for item in netloc.split(",") if netloc else []:
        if item.startswith("["):  # [::1] or [::1]:5432
            address, _, rest = item[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            address, _, port = item.rpartition(":") if ":" in item else (item, "", "")
        if port and not port.isdigit():
            raise environ.ImproperlyConfigured(f"DATABASE_URL: {item!r} has no valid port")
        hosts.append(unquote(address))
        ports.append(port)
    return hosts, ports

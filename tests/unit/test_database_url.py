"""DATABASE_URL in libpq's multi-host form (scheduler_site/database_url.py):
one port per host, socket directories decoded, and a host list that must
look for the primary."""

from __future__ import annotations

import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from scheduler_site.database_url import database_settings

RW = "?target_session_attrs=read-write"


def test_one_host_as_before():
    config = database_settings("postgres://u:p%40ss@db.example:6432/punctual")
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("db.example", "6432", "punctual")
    assert (config["USER"], config["PASSWORD"]) == ("u", "p@ss")


def test_one_socket_directory_is_decoded():
    config = database_settings("postgres://postgres@%2Ftmp%2FPg%20Data/punctual")
    assert (config["HOST"], config["PORT"]) == ("/tmp/Pg Data", "")


@pytest.mark.parametrize(
    "hosts, host, port",
    [
        ("db1:5433,db2:5434", "db1,db2", "5433,5434"),
        # A port written for one host only is that host's: the other keeps the default.
        ("db1,db2:5434", "db1,db2", ",5434"),
        ("db1:5433,db2", "db1,db2", "5433,"),
        ("db1,db2", "db1,db2", ""),
        ("[::1]:5433,[fd00::2]", "::1,fd00::2", "5433,"),
        ("%2Fsrv%2Fpg1,%2Fsrv%2Fpg2", "/srv/pg1,/srv/pg2", ""),
    ],
)
def test_several_hosts_become_libpq_lists(hosts, host, port):
    config = database_settings(f"postgresql://punctual@{hosts}/punctual{RW}&connect_timeout=3")
    assert (config["HOST"], config["PORT"]) == (host, port)
    assert config["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": 3}


@pytest.mark.parametrize("attrs", ["", "?target_session_attrs=any", "?connect_timeout=3"])
def test_several_hosts_must_look_for_the_primary(attrs):
    with pytest.raises(ImproperlyConfigured, match=r"several hosts.*target_session_attrs"):
        database_settings(f"postgres://u@db1,db2/punctual{attrs}")


@pytest.mark.parametrize("attrs", ["read-only", "standby", "prefer-standby"])
def test_a_standby_is_never_asked_for(attrs):
    with pytest.raises(ImproperlyConfigured, match=f"target_session_attrs={attrs}"):
        database_settings(f"postgres://u@db1/punctual?target_session_attrs={attrs}")


@pytest.mark.parametrize(
    "url, problem",
    [
        ("host=db1,db2 dbname=punctual", "must name a PostgreSQL server"),
        ("mysql://u@db1/punctual", "must name a PostgreSQL server"),
        ("postgres://u@db1:pg,db2/punctual" + RW, "'db1:pg' has no valid port"),
    ],
)
def test_what_is_not_a_postgresql_url_is_named(url, problem):
    with pytest.raises(ImproperlyConfigured, match=problem):
        database_settings(url)


@pytest.mark.django_db
def test_libpq_skips_a_dead_host_and_connects_to_the_writable_one():
    """The lists reach libpq as it reads them: a host that refuses
    connections first, then the test server."""
    db = connection.settings_dict
    real = db["HOST"] or "127.0.0.1"
    dead = "%2Fnonexistent-punctual-socket" if real.startswith("/") else "127.0.0.1:1"
    port = f":{db['PORT']}" if db["PORT"] and not real.startswith("/") else ""
    real = real.replace("/", "%2F")
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    config = database_settings(
        f"postgres://{db['USER']}{password}@{dead},{real}{port}/{db['NAME']}{RW}"
    )
    with psycopg.connect(
        host=config["HOST"],
        port=config["PORT"],
        dbname=config["NAME"],
        user=config["USER"],
        password=config["PASSWORD"],
        **config["OPTIONS"],
    ) as conn:
        assert conn.execute("SHOW transaction_read_only").fetchone() == ("off",)
        assert conn.info.host == db["HOST"] or conn.info.host.startswith("127.")

"""Hosts for the partition scenarios: Linux network namespaces on two switched
networks, and a PostgreSQL server on one of them.

Each host is a network namespace of its own. A "switch" namespace holds two
bridges, and a host joins a network by a veth pair whose far end is a port of
that network's bridge:

- the database network, ``10.77.1.0/24``: the database host and every host
  that runs a Punctual process;
- the delivery network, ``10.77.2.0/24``: the workers and the receiver.

So a worker reaches the database and the receiver over two different links,
and either path can be cut alone. ``cut`` sets the host's port down on the
switch: the host keeps its address and its routes, and what it sends on that
network vanishes. The far side never answers and never resets a connection:
as with a failed switch port, a connection open across the cut learns of it
only from its own TCP timeouts, and a new one fails to connect.

Only addresses inside the namespaces are used, and nothing is attached to the
machine's own namespace, so two test sessions on one machine do not meet.
Namespace names carry the process id and a random part; ``delete`` removes
them all (the processes in them must have been stopped first, or a namespace
lives on until they exit).

The PostgreSQL server (``start_database``) is the embedded one
(scheduler_site/localdb.py) started from inside the database host, so it
listens on that host's address; its clients reach it only over the database
network. Its Unix socket, outside any network namespace, is for the test's own
look-ups and the set-up.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from scheduler_site import localdb

DATABASE_NET = "10.77.1"
DELIVERY_NET = "10.77.2"
NETWORKS = {"db": DATABASE_NET, "app": DELIVERY_NET}
ROOT = Path(__file__).resolve().parents[1]


def missing() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (the partition scenarios run as root, as in CI)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    probe = f"punctual-probe-{os.getpid()}-{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def _ip(*args: str, namespace: str | None = None) -> None:
    where = ["-n", namespace] if namespace else []
    result = subprocess.run(["ip", *where, *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(where + list(args))}: {result.stderr.strip()}")


@dataclass
class Host:
    """One namespace: its name, its address on each network it joined."""

    name: str
    namespace: str
    addresses: dict[str, str] = field(default_factory=dict)

    @property
    def run(self) -> list[str]:
        """The command prefix that runs a program on this host."""
        return ["ip", "netns", "exec", self.namespace]


class Network:
    """The switch and the hosts of one scenario."""

    def __init__(self) -> None:
        self.tag = f"punctual-{os.getpid()}-{secrets.token_hex(2)}"
        self.switch = f"{self.tag}-switch"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []

    def start(self) -> Network:
        self._add_namespace(self.switch)
        for net in NETWORKS:
            _ip("link", "add", f"br-{net}", "type", "bridge", namespace=self.switch)
            _ip("link", "set", f"br-{net}", "up", namespace=self.switch)
        return self

    def _add_namespace(self, namespace: str) -> None:
        _ip("netns", "add", namespace)
        self._namespaces.append(namespace)
        _ip("link", "set", "lo", "up", namespace=namespace)

    def add_host(self, name: str, **octets: int) -> Host:
        """A host named ``name`` (at most 10 characters) with address
        ``<network>.<octet>`` on each network given (``db=``, ``app=``)."""
        host = Host(name, f"{self.tag}-{name}")
        self._add_namespace(host.namespace)
        for net, octet in octets.items():
            port = self._port(name, net)
            # The host's end is called after the network ("db", "app").
            _ip("link", "add", port, "type", "veth", "peer", "name", net, "netns", host.namespace,
                namespace=self.switch)  # fmt: skip
            _ip("link", "set", port, "master", f"br-{net}", "up", namespace=self.switch)
            address = f"{NETWORKS[net]}.{octet}"
            _ip("addr", "add", f"{address}/24", "dev", net, namespace=host.namespace)
            _ip("link", "set", net, "up", namespace=host.namespace)
            host.addresses[net] = address
        self.hosts[name] = host
        return host

    @staticmethod
    def _port(host: str, net: str) -> str:
        return f"{host}-{net}"

    def cut(self, host: Host, net: str) -> None:
        """Drop everything between ``host`` and the network ``net``, silently."""
        _ip("link", "set", self._port(host.name, net), "down", namespace=self.switch)

    def heal(self, host: Host, net: str) -> None:
        _ip("link", "set", self._port(host.name, net), "up", namespace=self.switch)

    def heal_all(self) -> None:
        for host in self.hosts.values():
            for net in host.addresses:
                self.heal(host, net)

    def delete(self) -> None:
        """Remove every namespace made (and with them their links)."""
        for namespace in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
        self._namespaces.clear()


# The embedded server's start, run by a Python process inside the database
# host: localdb starts pg_ctl as the server's own user (as root), and the
# server inherits the namespace.
_START = """
import json, sys
from pathlib import Path
from scheduler_site import localdb
localdb.start(Path(sys.argv[1]), settings=json.loads(sys.argv[2]))
"""


@dataclass
class Database:
    """The server on the database host, its data directory and its address."""

    data_dir: Path
    host: Host
    port: int = 5432

    def url(self, name: str = localdb.DATABASE, **params: str | int) -> str:
        """A ``DATABASE_URL`` over the database network, with libpq ``params``."""
        query = "&".join(f"{k}={v}" for k, v in params.items())
        address = self.host.addresses["db"]
        return f"postgres://{localdb.USER}@{address}:{self.port}/{name}" + (
            f"?{query}" if query else ""
        )

    def connect(self, name: str = localdb.DATABASE) -> psycopg.Connection:
        """A connection of the test's own, over the server's Unix socket."""
        return psycopg.connect(
            host=str(localdb.socket_dir(self.data_dir)),
            user=localdb.USER,
            dbname=name,
            autocommit=True,
        )

    def query(self, sql: str, params=(), name: str = localdb.DATABASE) -> list[tuple]:
        """``sql`` in the database ``name``: its rows (none for a command)."""
        with self.connect(name) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def stop(self) -> None:
        try:
            localdb.stop(self.data_dir, mode="immediate")
        except Exception as exc:  # cleanup goes on
            print(f"stopping {self.data_dir}: {exc}")


def start_database(host: Host, data_dir: Path, settings: dict[str, str]) -> Database:
    """The embedded PostgreSQL on ``host``, listening on its database address
    only (and its socket), accepting any client of the database network
    without a password (``trust``: the network is the scenario's own)."""
    address = host.addresses["db"]
    settings = {**settings, "listen_addresses": address}
    subprocess.run(
        [*host.run, sys.executable, "-c", _START, str(data_dir), json.dumps(settings)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    database = Database(Path(data_dir), host)
    hba = Path(data_dir) / "pg_hba.conf"
    with hba.open("a") as conf:
        conf.write(f"host all all {DATABASE_NET}.0/24 trust\n")
    database.query("SELECT pg_reload_conf()", name="postgres")
    return database

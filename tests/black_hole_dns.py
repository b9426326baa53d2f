"""Run a command whose DNS server never answers: ``unshare --net --mount
python -m tests.black_hole_dns --resolv-conf FILE -- ARGS...``.

Run as the first program in a network and a mount namespace of its own
(``black_hole_wrapper`` below says how to make them here), it

1. brings the namespace's loopback up (a new namespace starts with it down);
2. binds a UDP socket on 127.0.0.1:53 and never reads it: a query sent there
   is neither answered nor refused (a closed port would answer with an ICMP
   error, and the resolver would give up at once);
3. writes ``FILE``, naming that address as the only nameserver with the
   longest timeout and the most attempts glibc allows (30 s, 5: two and a
   half minutes per name), and bind-mounts it over /etc/resolv.conf, in
   this mount namespace only;
4. execs ``python ARGS...``, which inherits the socket: the black hole lasts
   as long as the command does.

Host names in /etc/hosts (``localhost``) still resolve at once: the system
resolver reads that file before it asks DNS.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:30 attempts:5\n"


def black_hole_wrapper() -> tuple[list[str], str | None]:
    """The command prefix that makes the namespaces (root needs no user
    namespace; anyone else maps themselves to root in one), and why it
    cannot work on this machine, or None."""
    if shutil.which("unshare") is None:
        return [], "util-linux's `unshare` is not installed"
    wrapper = ["unshare", "--net", "--mount"]
    if os.geteuid() != 0:
        wrapper.insert(1, "--map-root-user")
    probe = subprocess.run([*wrapper, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        why = probe.stderr.strip() or f"exit {probe.returncode}"
        return wrapper, f"`{' '.join(wrapper)}` failed: {why}"
    return wrapper, None


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resolv-conf", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    _loopback_up()
    hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hole.bind(("127.0.0.1", 53))
    hole.set_inheritable(True)
    with open(args.resolv_conf, "w") as conf:
        conf.write(RESOLV_CONF)
    subprocess.run(["mount", "--bind", args.resolv_conf, "/etc/resolv.conf"], check=True)
    os.execv(sys.executable, [sys.executable, *command])


if __name__ == "__main__":
    main()

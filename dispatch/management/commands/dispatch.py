"""``manage.py dispatch``: turn due fires into runs. Thin: parse, then loop."""

from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError

from dispatch.dispatcher import Dispatcher


def parse_shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    m = re.fullmatch(r"(\d+)/(\d+)", value)
    if not m or not 0 <= int(m[1]) < int(m[2]):
        raise CommandError(f"--shard must be K/N with 0 <= K < N, got {value!r}")
    return int(m[1]), int(m[2])


class Command(BaseCommand):
    help = "Turn due fires into runs; run several at once on any number of hosts."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="drain the due set once, then exit")
        parser.add_argument("--batch-size", type=int, default=1000, help="jobs per transaction")
        parser.add_argument("--shard", help="K/N: only jobs whose id hashes to K mod N")
        parser.add_argument("--name", help="name in the fleet list (default: kind-host-pid)")

    def handle(self, *args, **options):
        if not 1 <= options["batch_size"] <= 100_000:
            raise CommandError("--batch-size must be between 1 and 100000")
        dispatcher = Dispatcher(
            batch_size=options["batch_size"],
            shard=parse_shard(options["shard"]),
            name=options["name"],
        )
        if options["once"]:
            result = dispatcher.run_once()
            self.stdout.write(f"jobs={result.jobs} created={result.created}")
        else:
            dispatcher.run_forever()

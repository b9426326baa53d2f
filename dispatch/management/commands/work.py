"""``manage.py work``: deliver webhook runs. Thin: parse, then loop."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from dispatch.worker import Worker


class Command(BaseCommand):
    help = "Claim due webhook runs with a lease, deliver them, retry and complete them."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="deliver one batch, then exit")
        parser.add_argument("--concurrency", type=int, default=500, help="deliveries in flight")
        parser.add_argument("--lease-seconds", type=int, default=30, help="lease length")
        parser.add_argument("--name", help="worker name (the lease owner)")
        parser.add_argument(
            "--drain-seconds",
            type=float,
            help="on SIGTERM, how long deliveries in flight may finish (default: the lease)",
        )

    def handle(self, *args, **options):
        if not 1 <= options["concurrency"] <= 100_000:
            raise CommandError("--concurrency must be between 1 and 100000")
        if not 2 <= options["lease_seconds"] <= 3600:
            raise CommandError("--lease-seconds must be between 2 and 3600")
        if options["drain_seconds"] is not None and not 0 <= options["drain_seconds"] <= 3600:
            raise CommandError("--drain-seconds must be between 0 and 3600")
        worker = Worker(
            concurrency=options["concurrency"],
            lease_seconds=options["lease_seconds"],
            name=options["name"],
            drain_seconds=options["drain_seconds"],
        )
        if options["once"]:
            self.stdout.write(f"claimed={worker.run_once()}")
        else:
            worker.run_forever()

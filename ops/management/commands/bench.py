"""``manage.py bench``: the scenarios of docs/benchmarks.md; one JSON object per scenario."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from ops import bench
from ops.bench.audit import scenario_audit
from ops.bench.create import scenario_create
from ops.bench.dispatch import drain, scenario_dispatch
from ops.bench.e2e import scenario_e2e, scenario_overload
from ops.bench.history import scenario_history
from ops.bench.idle import scenario_idle
from ops.bench.login import scenario_login
from ops.bench.machine import describe_machine, machine
from ops.bench.recovery import scenario_recovery
from ops.bench.scale import scenario_scale
from ops.bench.scratch import check_scratch
from ops.bench.slow import scenario_slow

SCENARIOS = (
    "dispatch",
    "scale",
    "e2e",
    "overload",
    "slow",
    "recovery",
    "create",
    "audit",
    "idle",
    "history",
    "login",
    "all",
)
# "all" runs the other scenarios of docs/benchmarks.md in turn; these run on their own.
ALONE = ("audit", "idle", "history", "login", "overload")


class Command(BaseCommand):
    help = "Benchmark Punctual on PostgreSQL (a scratch database). Prints JSON lines."

    def add_arguments(self, parser):
        parser.add_argument("scenario", choices=(*SCENARIOS, "drain"))
        parser.add_argument(
            "--jobs",
            type=int,
            help="jobs (dispatch 100000, scale 1000000, e2e 2000, recovery 1000)",
        )
        parser.add_argument("--due", type=int, help="due jobs (dispatch/scale: 100000)")
        parser.add_argument("--batch-size", type=int, default=1000)
        parser.add_argument("--repeat", type=int, default=3, help="runs; figures are medians")
        parser.add_argument("--interval", type=int, default=1, help="e2e: seconds between fires")
        parser.add_argument(
            "--duration", type=float, default=60, help="e2e, login: seconds measured"
        )
        parser.add_argument(
            "--workers",
            type=int,
            help="e2e: 1 worker; overload, slow: 2 workers; idle: 50 workers",
        )
        parser.add_argument("--concurrency", type=int, default=500, help="e2e worker concurrency")
        parser.add_argument(
            "--receiver",
            choices=("aiohttp", "plain"),
            default="aiohttp",
            help="e2e: the aiohttp receiver, or a plain asyncio one that parses each JSON body",
        )
        parser.add_argument("--no-web", action="store_true", help="e2e: without gunicorn")
        parser.add_argument("--inflight", type=int, default=4000, help="slow: deliveries")
        parser.add_argument("--delay", type=float, default=2.0, help="slow: receiver seconds")
        parser.add_argument("--window", type=float, default=10, help="idle: seconds measured")
        parser.add_argument("--wakeups", type=int, default=20, help="idle: triggers timed")
        parser.add_argument(
            "--singles", type=int, default=2000, help="create: single creates per client pass"
        )
        parser.add_argument(
            "--clients",
            type=int,
            default=8,
            help="create: parallel clients; login: threads posting wrong passwords",
        )
        parser.add_argument("--batches", type=int, default=20, help="create: bulk requests")
        parser.add_argument(
            "--bulk-size", type=int, default=1000, help="create: jobs per bulk request (<= 1000)"
        )
        parser.add_argument(
            "--history-runs",
            type=int,
            default=50_000_000,
            help="history: finished runs of history over 30 days (default %(default)s)",
        )
        parser.add_argument("--force", action="store_true", help="run beside foreign jobs")

    def handle(self, *args, **o):
        for name in (
            "jobs",
            "due",
            "repeat",
            "duration",
            "workers",
            "inflight",
            "wakeups",
            "singles",
            "clients",
            "batches",
            "bulk_size",
            "history_runs",
        ):
            if o.get(name) is not None and o[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        if o["scenario"] == "drain":  # one of the two dispatchers of `dispatch`
            self.stdout.write(json.dumps(drain(o["batch_size"])))
            return
        try:
            check_scratch(o["force"])
        except bench.BenchRefused as exc:
            raise CommandError(str(exc)) from exc
        if o["window"] <= 0:
            raise CommandError("--window must be more than 0")
        if o["bulk_size"] > 1000:
            raise CommandError("--bulk-size must be at most 1000 (the API's limit per request)")
        every = tuple(s for s in SCENARIOS if s not in (*ALONE, "all"))
        wanted = every if o["scenario"] == "all" else (o["scenario"],)
        # Where the figures hold, for the person reading them (the JSON of
        # each scenario carries the same under "machine").
        self.stderr.write(f"bench on {describe_machine(machine())}")
        for scenario in wanted:
            try:
                params, figures = self.run(scenario, o)
            except bench.BenchFailed as exc:
                raise CommandError(f"{scenario}: {exc}") from exc
            self.stdout.write(
                json.dumps(
                    {"scenario": scenario, "params": params, "machine": machine(), **figures}
                )
            )

    def run(self, scenario: str, o: dict):
        if scenario in ("dispatch", "scale"):
            jobs = o["jobs"] or (100_000 if scenario == "dispatch" else 1_000_000)
            params = {
                "jobs": jobs,
                "due": min(o["due"] or 100_000, jobs),
                "batch": o["batch_size"],
                "repeat": o["repeat"],
            }
            fn = scenario_dispatch if scenario == "dispatch" else scenario_scale
            return params, fn(**params, force=o["force"])
        if scenario == "recovery":
            params = {"jobs": o["jobs"] or 1000, "batch": o["batch_size"], "repeat": o["repeat"]}
            return params, scenario_recovery(**params, force=o["force"])
        if scenario in ("e2e", "overload"):
            # overload runs e2e at --jobs and at twice as many.
            e2e = scenario == "e2e"
            params = {
                "jobs": o["jobs"] or (2000 if e2e else 20000),
                "interval": o["interval"],
                "duration": o["duration"],
                "workers": o["workers"] or (1 if e2e else 2),
                "concurrency": o["concurrency"],
                "receiver": o["receiver"],
                "web": not o["no_web"],
            }
            if e2e:
                return params, scenario_e2e(**params, force=o["force"])
            return params, scenario_overload(**params, force=o["force"])
        if scenario == "create":
            params = {
                "singles": o["singles"],
                "clients": o["clients"],
                "batches": o["batches"],
                "batch_size": o["bulk_size"],
                "repeat": o["repeat"],
            }
            return params, scenario_create(**params, force=o["force"])
        if scenario == "audit":
            params = {
                "jobs": o["jobs"] or 10_000,
                "runs_per_job": 100,
                "cron_share": 0.1,
                "repeat": o["repeat"],
            }
            return params, scenario_audit(**params, force=o["force"])
        if scenario == "idle":
            params = {
                "workers": o["workers"] or 50,
                "window": o["window"],
                "wakeups": o["wakeups"],
            }
            return params, scenario_idle(**params, force=o["force"])
        if scenario == "login":
            params = {"clients": o["clients"], "duration": o["duration"]}
            return params, scenario_login(**params, force=o["force"])
        if scenario == "history":
            params = {
                "runs": o["history_runs"],
                "due": o["due"] or 20_000,
                "batch": o["batch_size"],
                "repeat": o["repeat"],
            }
            return params, scenario_history(**params, force=o["force"])
        params = {"inflight": o["inflight"], "delay": o["delay"], "workers": o["workers"] or 2}
        return params, scenario_slow(**params, force=o["force"])

"""Helpers shared by the admin's integration and browser tests (real rows, no mocks)."""

from __future__ import annotations

import datetime as dt
import importlib
import socket
import threading

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import MD5PasswordHasher
from django.contrib.auth.models import Group, Permission

from core.db import db_now
from dispatch.models import ProcessHeartbeat, ProcessKind
from dispatch.worker import Worker
from runs import job_verbs
from runs.models import Attempt, Run

OWNERS_GROUP = "Job owners"
PASSWORD = "pw-owner-123"

_migration = importlib.import_module("jobs.migrations.0002_job_owners_group")
_alerts_migration = importlib.import_module(
    "alerts.migrations.0002_job_owners_manage_their_alert_channels"
)


def owners_group() -> Group:
    """The group the migration made. Transactional tests (the browser's live
    server) flush the database between tests, so it is made again from the
    migrations' own lists when it is gone."""
    group, created = Group.objects.get_or_create(name=OWNERS_GROUP)
    if created:
        granted = {**_migration.PERMISSIONS, "alerts": _alerts_migration.PERMISSIONS}
        for app_label, codenames in granted.items():
            group.permissions.add(
                *Permission.objects.filter(
                    content_type__app_label=app_label, codename__in=codenames
                )
            )
    return group


def make_owner(username: str, *, superuser: bool = False):
    """A job owner as ``manage.py create_owner`` makes one: staff, in the group."""
    user = get_user_model().objects.create_user(
        username, password=PASSWORD, is_staff=True, is_superuser=superuser
    )
    user.groups.add(owners_group())
    return user


def make_run(job, *, state: str = "succeeded", ago: float = 60.0, **fields) -> Run:
    """A run of ``job`` scheduled ``ago`` seconds before the database's now."""
    now = db_now()
    fields.setdefault("scheduled_at", now - dt.timedelta(seconds=ago))
    fields.setdefault("available_at", fields["scheduled_at"])
    fields.setdefault("target_kind", job.target_kind)  # as the dispatcher copies it
    if state in ("succeeded", "failed", "missed", "skipped", "cancelled"):
        fields.setdefault("finished_at", fields["scheduled_at"] + dt.timedelta(seconds=2))
    if state in ("succeeded", "failed", "running", "retrying"):
        fields.setdefault("started_at", fields["scheduled_at"] + dt.timedelta(seconds=0.5))
        fields.setdefault("lag_seconds", 0.5)
        fields.setdefault("attempt", 1)
    return Run.objects.create(job=job, state=state, max_attempts=job.max_attempts, **fields)


def add_attempt(run: Run, *, number: int = 1, outcome: str = "succeeded", **fields) -> Attempt:
    fields.setdefault("started_at", run.started_at or run.scheduled_at)
    fields.setdefault("finished_at", fields["started_at"] + dt.timedelta(seconds=1))
    fields.setdefault("duration_ms", 1000)
    fields.setdefault("worker", "worker-test")
    return Attempt.objects.create(run=run, number=number, outcome=outcome, **fields)


def deliver(job, times: int = 1) -> None:
    """Manual runs of ``job``, one after the other, each delivered to its URL
    by the worker's own code (``Worker.run_once``): the runs, attempts,
    failure streak and automatic pause are what a live worker would write."""
    for _ in range(times):
        job_verbs.trigger(job)
        assert Worker(concurrency=1, lease_seconds=5, allow_private=True).run_once() == 1


def beat(kind: str = ProcessKind.DISPATCHER, *, ago: float = 0.0, name: str | None = None):
    """A heartbeat row, as a live process would write it, ``ago`` seconds old."""
    now = db_now()
    seen = now - dt.timedelta(seconds=ago)
    row, _ = ProcessHeartbeat.objects.update_or_create(
        name=name or f"{kind}-test",
        defaults={
            "kind": kind,
            "host": socket.gethostname(),
            "pid": 4242,
            "started_at": seen - dt.timedelta(minutes=5),
            "last_seen": seen,
        },
    )
    return row


class CountingHasher(MD5PasswordHasher):
    """A real password hasher that counts how often it hashes.

    ``verify`` hashes through ``encode`` too, so ``encodes`` counts every
    password hashed: set, checked, or hashed against timing attacks for a
    user name that does not exist."""

    algorithm = "counting_md5"
    encodes = 0

    def encode(self, password: str, salt: str) -> str:
        type(self).encodes += 1
        return super().encode(password, salt)


class HeldHasher(CountingHasher):
    """Checks a password only once ``release`` is set: a sign-in held in the
    middle of its hashing, for as long as a test needs."""

    algorithm = "held_md5"
    hashing = threading.Event()
    release = threading.Event()

    def verify(self, password: str, encoded: str) -> bool:
        type(self).hashing.set()
        assert type(self).release.wait(timeout=60), "the test never released the hash"
        return super().verify(password, encoded)

"""``manage.py demo``: the demo owner and job that ``make run`` starts with.

Idempotent: a second run finds the owner, its token and its job, and changes
nothing. The owner's password and API key are generated once and kept in
``var/demo-credentials.txt`` (mode 0600), so re-running prints them again
instead of resetting them (the database holds only the key's digest). A key
that no longer works (rotated or revoked in the admin) is replaced.
"""

from __future__ import annotations

import ipaddress
import secrets
import uuid
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts import tokens
from jobs import changes
from jobs.models import Channel, Job
from jobs.targets import configured_rule, is_allowed_address

USERNAME = "admin"
JOB_NAME = "Demo: every 10 seconds"


def credentials_file() -> Path:
    return Path(settings.BASE_DIR) / "var" / "demo-credentials.txt"


def stored(path: Path, name: str) -> str | None:
    """The value of ``name=...`` in the credentials file, if any."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == name and value.strip():
            return value.strip()
    return None


def store(path: Path, name: str, value: str) -> None:
    """Set ``name=value`` in the credentials file, keeping its other lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    values = {"username": USERNAME}
    for line in path.read_text().splitlines():
        key, _, old = line.partition("=")
        if key.strip():
            values[key.strip()] = old.strip()
    values[name] = value
    path.write_text("".join(f"{key}={val}\n" for key, val in values.items()))


class Command(BaseCommand):
    help = "Create the demo owner and a demo job that targets the built-in receiver (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--base-url",
            default="http://127.0.0.1:8000",
            help="where the web app listens (make run passes its PORT, 8000 by default)",
        )
        parser.add_argument("--interval", type=int, default=10, help="seconds between fires")

    def handle(self, *args, **options):
        base = options["base_url"].rstrip("/")
        if not 1 <= options["interval"] <= 31_536_000:
            raise CommandError("--interval must be between 1 and 31536000 seconds")
        with transaction.atomic():
            user, password = self.ensure_owner()
            key = self.ensure_key(user)
            job, created = self.ensure_job(user, base, options["interval"])
        if not is_allowed_address(ipaddress.ip_address("127.0.0.1"), **configured_rule()):
            self.stderr.write(
                "warning: this is not demo mode, so workers will refuse the demo receiver on"
                " 127.0.0.1 (make run sets PUNCTUAL_DEMO=true)"
            )
        shown = password or "(unchanged; set one with: manage.py changepassword admin)"
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "Punctual demo " + ("created" if created else "already set up") + ":",
                    f"  admin      {base}/admin/  user {USERNAME}  password {shown}",
                    f"  demo job   {job.pk}  ({job.name})",
                    f"  receiver   {base}/demo/receiver/{job.pk}/",
                    f"  any job    {base}/demo/receiver/   (?status=500 fails, &delay=3 is slow)",
                    f"  saved in   {credentials_file()}  (user, password, API token)",
                    f"  health     {base}/api/v1/health/",
                    f"  metrics    {base}/metrics",
                    f'  API        curl -H "Authorization: Token {key}" {base}/api/v1/jobs/',
                    "Stop everything with Ctrl-C.",
                    f"API token: {key}",
                ]
            )
        )

    def ensure_owner(self):
        """The demo superuser; its password is created once, never reset."""
        User = get_user_model()
        path = credentials_file()
        password = stored(path, "password")
        user = User.objects.filter(username=USERNAME).first()
        if user is None:
            if password is None:
                password = secrets.token_urlsafe(12)
                store(path, "password", password)
            user = User.objects.create_superuser(USERNAME, email="", password=password)
        return user, password

    def ensure_key(self, user) -> str:
        """The stored API key while it is the owner's live token, else a new one."""
        path = credentials_file()
        key = stored(path, "token")
        if key is None or not tokens.key_matches(user, key):
            _, key = tokens.issue(user)
            store(path, "token", key)
        return key

    def ensure_job(self, user, base: str, interval: int) -> tuple[Job, bool]:
        job = Job.objects.live().filter(owner=user, name=JOB_NAME).first()
        if job is not None:
            self.follow_the_port(job, base)
            return job, False
        # The receiver's URL names the job, so the id is chosen before saving.
        job_id = uuid.uuid4()
        values = {
            "name": JOB_NAME,
            "description": "Created by manage.py demo: delivers to the built-in demo receiver.",
            "interval_seconds": interval,
            "url": f"{base}/demo/receiver/{job_id}/",
            "payload": {"hello": "from Punctual"},
            "timeout_seconds": 10,
        }
        job = Job(id=job_id, owner=user, **values)
        job.save(force_insert=True)
        job.record_event("created", channel=Channel.SYSTEM, changes=changes.initial(values))
        return job, True

    @staticmethod
    def follow_the_port(job: Job, base: str) -> None:
        """The demo job calls the receiver where the web app listens now:
        ``make run PORT=8001`` after a run on 8000 moves its URL, as an edit
        with its event, so the job never calls whatever else took the port."""
        url = f"{base}/demo/receiver/{job.pk}/"
        if job.url == url:
            return
        before = changes.snapshot(job, ["url"])
        job.url = url
        job.save(update_fields=["url"])
        job.record_event("updated", channel=Channel.SYSTEM, changes=changes.since(before, job))

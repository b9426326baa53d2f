"""A screenshot of every admin page, over realistic data, for a person to look at.

An owner with 50 jobs (crons and intervals, webhooks and pull queues), runs in
every state over the last two days, a job the system paused after a failure
streak, failing jobs, missed fires, a backfill, and audit events. Each page is
opened in Chromium at 1400×900 and saved under ``.screenshots/`` in the
checkout (ignored by git; every browser run writes them anew, `make test`
and CI included) twice: the window as a person sees it, and the
whole page (``_full``). Each must have answered 200, show no error, show the
elements it is for, and be no wider than the window.
"""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.db import transaction
from django.test import Client
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from accounts import tokens
from core.db import db_now
from jobs.models import Job, JobEvent, OwnerLimits
from runs import job_verbs
from runs.models import Attempt, Run
from tests.admin_support import beat, make_owner
from tests.browser.conftest import SCREENSHOTS
from tests.factories import make_job

SIZE = (1400, 900)
NAMES = [
    "billing-sync", "nightly-report", "invoice-reminders", "search-reindex",
    "cache-warmup", "payroll-export", "crm-import", "newsletter-send", "backup-verify",
    "metrics-rollup", "stale-session-purge", "sitemap-build", "fx-rates-fetch",
    "inventory-recount", "webhook-replay", "audit-archive", "slack-digest", "ssl-expiry-check",
]  # fmt: skip
ERRORS = [
    (500, "Internal Server Error"),
    (503, "Service Unavailable: upstream timed out after 30 s while contacting the ledger"),
    (None, "connection refused (errno 111) while connecting to 10.0.4.17:443"),
    (404, "Not Found"),
]


def build_fleet(owner) -> dict[str, object]:
    """Fifty jobs and two days of their runs, attempts and events."""
    rng = random.Random(15)
    now = db_now()
    jobs = []
    for i in range(50):
        name = f"{NAMES[i % len(NAMES)]}-{i // len(NAMES) + 1}" if i >= len(NAMES) else NAMES[i]
        fields: dict[str, object] = {"name": name, "payload": {"job": name, "n": i}}
        if i % 3 == 0:
            fields.update(cron=["*/15 * * * *", "30 2 * * *", "0 9 * * 1-5"][i % 9 // 3])
            fields.update(timezone=["Europe/Berlin", "America/New_York", "UTC"][i % 3])
        else:
            fields["interval_seconds"] = [60, 300, 900, 3600][i % 4]
        if i % 10 == 7:
            fields.update(target_kind="pull", url="")
        else:
            fields["url"] = f"https://93.184.215.{i % 200}/hooks/{name}"
        jobs.append(make_job(owner, **fields))

    runs, attempts = [], []
    for index, job in enumerate(jobs):
        failing = index in (1, 4, 9)
        for n in range(12):
            at = now - dt.timedelta(minutes=15 * (n + 1) + index)
            state = rng.choice(["succeeded"] * 8 + ["failed", "missed", "skipped"])
            if failing and n < 3:
                state = "failed"
            run = Run(
                job=job,
                scheduled_at=at,
                available_at=at,
                state=state,
                kind="scheduled",
                max_attempts=job.max_attempts,
                target_kind=job.target_kind,
            )
            if state in ("succeeded", "failed"):
                run.attempt = 1 if state == "succeeded" else 3
                run.started_at = at + dt.timedelta(seconds=rng.uniform(0.1, 2))
                run.finished_at = run.started_at + dt.timedelta(seconds=rng.uniform(0.2, 4))
                run.lag_seconds = (run.started_at - at).total_seconds()
                if state == "failed":
                    code, error = ERRORS[(index + n) % len(ERRORS)]
                    run.last_status_code, run.last_error = code, error
                for number in range(1, run.attempt + 1):
                    attempts.append(
                        Attempt(
                            run=run,
                            scheduled_at=run.scheduled_at,
                            number=number,
                            worker=f"worker-{index % 3}",
                            started_at=run.started_at,
                            finished_at=run.finished_at,
                            outcome=(
                                "succeeded"
                                if state == "succeeded"
                                else ("permanent" if number == run.attempt else "failed")
                            ),
                            status_code=200 if state == "succeeded" else run.last_status_code,
                            duration_ms=int(rng.uniform(80, 3000)),
                            error="" if state == "succeeded" else run.last_error,
                        )
                    )
            elif state == "missed":
                run.reason = "past grace"
                run.finished_at = at
            elif state == "skipped":
                run.reason = "overlap"
                run.finished_at = at
            runs.append(run)
        if failing:
            Job.objects.filter(pk=job.pk).update(consecutive_failures=3)

    # The states that are not history: now, soon, later.
    active = jobs[10:16]
    extra = [
        Run(job=active[0], scheduled_at=now - dt.timedelta(seconds=8), state="running",
            attempt=1, started_at=now - dt.timedelta(seconds=7), lag_seconds=1.2,
            lease_owner="worker-host-2-4242", lease_until=now + dt.timedelta(seconds=22),
            deadline_at=now + dt.timedelta(seconds=40), available_at=now - dt.timedelta(seconds=8)),
        Run(job=active[1], scheduled_at=now - dt.timedelta(seconds=95), state="running",
            attempt=2, started_at=now - dt.timedelta(seconds=90), lag_seconds=0.4,
            lease_owner="worker-host-1-999", lease_until=now - dt.timedelta(seconds=12),
            exclusive=False, available_at=now - dt.timedelta(seconds=95)),
        Run(job=active[2], scheduled_at=now - dt.timedelta(minutes=3), state="retrying",
            attempt=1, available_at=now + dt.timedelta(seconds=40), last_status_code=503,
            last_error="Service Unavailable"),
        Run(job=active[3], scheduled_at=now - dt.timedelta(seconds=70), state="pending",
            available_at=now - dt.timedelta(seconds=70)),
        Run(job=active[4], scheduled_at=now + dt.timedelta(seconds=20), state="pending",
            available_at=now + dt.timedelta(seconds=20)),
        Run(job=active[5], scheduled_at=now - dt.timedelta(days=1, hours=3), state="pending",
            kind="backfill", available_at=now + dt.timedelta(minutes=2)),
        Run(job=active[5], scheduled_at=now - dt.timedelta(hours=30), state="cancelled",
            reason="paused", finished_at=now - dt.timedelta(hours=29)),
    ]  # fmt: skip
    for run in extra:
        run.max_attempts = run.job.max_attempts
    Run.objects.bulk_create(runs + extra)
    Attempt.objects.bulk_create(attempts)
    Attempt.objects.create(
        run=extra[2], number=1, worker="worker-0", started_at=now - dt.timedelta(minutes=3),
        finished_at=now - dt.timedelta(minutes=3) + dt.timedelta(seconds=2), outcome="failed",
        status_code=503, duration_ms=2012, error="Service Unavailable",
    )  # fmt: skip

    with transaction.atomic():
        job_verbs.pause_by_system(
            jobs[4].pk, note="Paused automatically after 3 consecutive failed runs.", now=now
        )
    nightly = jobs[1]
    job_verbs.edit(
        nightly,
        {"timeout_seconds": 45, "payload": {"job": nightly.name, "n": 1, "full": True}},
        actor=owner,
        channel="admin",
    )
    job_verbs.pause(jobs[20], actor=owner, channel="api", note="receiver being migrated")
    job_verbs.pause(jobs[21], actor=owner, channel="admin")
    job_verbs.resume(jobs[21], actor=owner, channel="admin")
    jobs[2].rotate_secret(actor=owner, channel="admin")
    job_verbs.trigger(jobs[3], actor=owner, channel="api")
    return {
        "jobs": jobs,
        "nightly": nightly,
        "running": extra[0],
        "failed_job": jobs[1],
        "auto_paused": jobs[4],
    }


def shoot(page, name: str, path: str, *, present: list[str]) -> None:
    """Open ``path``, check that it rendered, and save it as ``name``.png."""
    page.open(path)
    text = page.text
    for problem in ("Traceback", "Server Error (500)", "Page not found", "cannot be shown"):
        assert problem not in text, (path, problem)
    for css in present:
        assert page.has(css), (path, css)
    size = page.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    width = page.driver.execute_script("return document.documentElement.clientWidth")
    assert size["width"] <= width + 1, f"{path} is wider than the window: {size['width']}"
    SCREENSHOTS.mkdir(exist_ok=True)
    page.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))  # the window, as seen
    page.screenshot(f"{name}_full")  # the whole page


@pytest.fixture
def wide_page(page):
    page.driver.set_window_size(*SIZE)
    return page


def test_every_admin_page_renders_at_1400_px_and_is_saved_as_a_screenshot(wide_page):
    beat()
    beat("worker", name="worker-host-2")
    ann = make_owner("ann")
    root = make_owner("root", superuser=True)
    fleet = build_fleet(ann)
    tokens.issue(ann)
    OwnerLimits.objects.create(owner=ann, jobs_per_owner=200, note="pilot customer")
    event = JobEvent.objects.filter(job=fleet["nightly"], action="updated").get()
    run: Run = fleet["running"]
    auto: Job = fleet["auto_paused"]

    pages = [
        ("01_dashboard", "/admin/dashboard/", ["#attention", "#card-failing li a", "#fleet"]),
        ("02_index", "/admin/", ["#attention", "#card-system-paused li a"]),
        ("03_jobs_list", "/admin/jobs/job/", ["#result_list", "#changelist-filter"]),
        ("04_job_page", f"/admin/jobs/job/{fleet['nightly'].pk}/change/", ["#job_form"]),
        ("05_job_add", "/admin/jobs/job/add/", ["#job_form", "#id_name"]),
        ("06_runs_list", "/admin/runs/run/", ["#result_list", ".toplinks", "#job-filter"]),
        ("07_runs_running", "/admin/runs/run/?status=running", ["#result_list .field-lease"]),
        ("08_run_page", f"/admin/runs/run/{run.pk}/change/", ["#attempts-group", "details"]),
        ("09_events_list", "/admin/jobs/jobevent/", ["#result_list", "ul.punctual-changes"]),
        ("10_event_page", f"/admin/jobs/jobevent/{event.pk}/change/", ["ul.punctual-changes"]),
        ("11_my_token", "/admin/token/", ["#content-main"]),
        ("14_job_auto_paused", f"/admin/jobs/job/{auto.pk}/change/", ["#job-status #resume-job"]),
        ("15_pause_form", f"/admin/jobs/job/{fleet['nightly'].pk}/pause/", ["#content-main form"]),
        (
            "16_rotate_confirm",
            f"/admin/jobs/job/{fleet['nightly'].pk}/rotate-secret/",
            ["#content-main form"],
        ),
        ("17_delete_confirm", f"/admin/jobs/job/{fleet['nightly'].pk}/delete/", ["#content form"]),
    ]
    client = Client()
    client.force_login(ann)
    for _name, path, _present in pages:
        assert client.get(path).status_code == 200, path

    wide_page.log_in("ann")
    for name, path, present in pages:
        shoot(wide_page, name, path, present=present)
    # The job form with its live preview filled in, as an owner types a cron.
    shoot(wide_page, "18_job_add_preview", "/admin/jobs/job/add/", present=["#schedule-preview"])
    for css, value in (("#id_interval_seconds", ""), ("#id_cron", "30 2 * * *")):
        field = wide_page.find(css)
        field.clear()
        field.send_keys(value)
    wide_page.wait(
        EC.text_to_be_present_in_element((By.CSS_SELECTOR, "#schedule-preview"), "At 02:30")
    )
    preview = wide_page.find("#schedule-preview")
    wide_page.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", preview)
    wide_page.driver.save_screenshot(str(SCREENSHOTS / "18_job_add_preview.png"))
    wide_page.screenshot("18_job_add_preview_full")

    # A new owner's empty jobs list, with its hint.
    make_owner("newcomer")
    wide_page.driver.delete_all_cookies()
    wide_page.log_in("newcomer")
    shoot(wide_page, "19_jobs_list_empty", "/admin/jobs/job/", present=["#no-jobs-hint"])

    limits = [
        ("12_owner_limits", "/admin/jobs/ownerlimits/", ["#result_list"]),
        ("13_owner_limits_add", "/admin/jobs/ownerlimits/add/", ["#ownerlimits_form"]),
    ]
    client.force_login(root)
    for _name, path, _present in limits:
        assert client.get(path).status_code == 200, path
    wide_page.driver.delete_all_cookies()
    wide_page.log_in("root")
    for name, path, present in limits:
        shoot(wide_page, name, path, present=present)
    saved = {path.stem for path in SCREENSHOTS.glob("*.png")}
    shot = {name for name, _path, _present in pages + limits}
    assert shot | {"18_job_add_preview", "19_jobs_list_empty"} <= saved

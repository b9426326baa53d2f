"""The admin in a real browser: an owner logs in, creates a job and sees its
next fires and its secret (once), pauses and resumes it from the list, filters
runs, sees the dispatcher banner come and go, and cannot see another owner's
jobs or runs. Screenshots of the main screens go to .screenshots/."""

from __future__ import annotations

import datetime as dt

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select

from core.db import db_now
from dispatch.models import LagSample
from jobs import crypto
from jobs.models import Job
from runs import job_verbs
from runs.models import Run
from tests.admin_support import add_attempt, beat, make_owner, make_run
from tests.factories import make_job


def give_history(job: Job, states: list[str], every: int = 300) -> list[Run]:
    """Runs of ``job`` in ``states`` order, oldest first, ``every`` seconds apart."""
    runs = []
    for index, state in enumerate(states):
        ago = every * (len(states) - index)
        extra = {}
        if state == "failed":
            extra = {"last_status_code": 500, "last_error": "Internal Server Error"}
        if state == "missed":
            extra = {"reason": "past grace"}
        run = make_run(job, state=state, ago=ago, **extra)
        if state in ("succeeded", "failed"):
            add_attempt(run, outcome="succeeded" if state == "succeeded" else "permanent")
        runs.append(run)
    return runs


def test_owner_creates_a_job_and_sees_its_next_fires_and_its_secret_once(page):
    beat()  # a live dispatcher: this page is about the job, not the banner
    make_owner("ann")
    page.log_in("ann")

    page.open("/admin/jobs/job/add/")
    for heading in ("Schedule", "Target", "Delivery and retries", "Policies"):
        assert heading in page.text
    page.find("#id_name").send_keys("nightly-report")
    page.find("#id_cron").send_keys("30 2 * * *")
    page.find("#id_timezone").clear()
    page.find("#id_timezone").send_keys("Europe/Berlin")
    page.find("#id_url").send_keys("https://93.184.215.14/hooks/report")
    page.click_and_wait(page.find("input[name=_save]"))

    job = Job.objects.get(name="nightly-report")
    secret = page.wait(EC.visibility_of_element_located((By.ID, "secret-value"))).text
    assert secret == crypto.decrypt(job.secret_encrypted)
    assert "from standardwebhooks.webhooks import Webhook" in page.find("#verify-snippet").text

    fires = page.find_all("table.punctual-fires tbody tr")
    assert len(fires) == 10
    first = fires[0].text
    assert "02:30:00" in first and ("UTC+01:00 (CET)" in first or "UTC+02:00 (CEST)" in first)
    assert "At 02:30, Europe/Berlin" in page.text
    page.screenshot("job_page")

    page.driver.refresh()
    page.wait(EC.presence_of_element_located((By.CSS_SELECTOR, "table.punctual-fires")))
    assert not page.has("#new-secret")
    assert "whsec_" not in page.driver.page_source
    assert "Hidden. A secret is shown once" in page.text


def test_owner_pauses_and_resumes_a_job_with_the_list_actions(page):
    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="billing-sync", interval_seconds=300)
    give_history(job, ["succeeded"] * 6 + ["failed", "succeeded", "missed"] + ["succeeded"] * 5)
    nightly = make_job(ann, name="nightly-report", cron="0 2 * * *", timezone="Europe/Berlin")
    give_history(nightly, ["succeeded", "succeeded", "failed", "failed"], every=86_400)
    make_job(ann, name="queue-drain", target_kind="pull", url="", interval_seconds=60)
    page.log_in("ann")

    def act(action: str, message: str) -> None:
        page.open("/admin/jobs/job/")
        page.find(f"input[name=_selected_action][value='{job.pk}']").click()
        Select(page.find("select[name=action]")).select_by_value(action)
        page.click_and_wait(page.find("button[name=index]"))
        page.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), message))

    page.open("/admin/jobs/job/")
    page.find(f"input[name=_selected_action][value='{job.pk}']").click()
    Select(page.find("select[name=action]")).select_by_value("pause_jobs")
    page.click_and_wait(page.find("button[name=index]"))
    page.find("#id_note").send_keys("billing migration")  # the pause asks for a note first
    page.click_and_wait(page.find("#confirm-pause"))
    page.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "Paused 1 job."))
    row = page.find(f"input[value='{job.pk}']").find_element(By.XPATH, "./ancestor::tr")
    assert "Paused" in row.text
    job.refresh_from_db()
    assert (job.state, job.pause_note) == ("paused", "billing migration")

    act("resume_jobs", "Resumed 1 job.")
    job.refresh_from_db()
    assert job.state == "active" and job.next_fire_at is not None
    row = page.find(f"input[value='{job.pk}']").find_element(By.XPATH, "./ancestor::tr")
    assert "Active" in row.text and "every 5 minutes" in row.text
    assert len(row.find_elements(By.CSS_SELECTOR, ".punctual-sq")) == 14
    page.screenshot("jobs_list")


def test_owner_filters_runs_to_missed_and_to_failed(page):
    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="billing-sync")
    give_history(job, ["succeeded", "missed", "failed", "succeeded", "missed", "succeeded"])
    now = db_now()
    make_run(
        job,
        state="running",
        ago=3,
        lease_owner="worker-host1-4242",
        lease_until=now + dt.timedelta(seconds=27),
    )
    page.log_in("ann")

    page.open("/admin/runs/run/")
    assert len(page.find_all("#result_list tbody tr")) == 7
    assert "worker-host1-4242" not in page.text  # the worker: on the running runs' list
    page.screenshot("runs_list")
    page.open("/admin/runs/run/?status=running")
    assert "worker-host1-4242" in page.text

    for label, state, expected in (("Missed", "missed", 2), ("Failed", "failed", 1)):
        link = page.driver.find_element(By.LINK_TEXT, label)
        page.click_and_wait(link)
        assert f"status={state}" in page.driver.current_url
        rows = page.find_all("#result_list tbody tr")
        assert len(rows) == expected
        assert all(state.capitalize() in row.text for row in rows)
    assert "HTTP 500: Internal Server Error" in page.text

    # The failed run's page: its attempts inline, and a retry button.
    page.click_and_wait(page.find("#result_list tbody tr th a"))
    assert "Failed (permanent)" in page.find(".inline-group").text
    assert page.has("#retry-run")
    page.screenshot("run_page")


def test_the_banner_shows_while_no_dispatcher_is_alive_and_not_when_one_is(page):
    ann = make_owner("ann")
    page.log_in("ann")

    page.open("/admin/")
    banner = page.wait(EC.visibility_of_element_located((By.ID, "dispatcher-banner")))
    assert "No dispatcher is running: fires are late." in banner.text
    assert "No dispatcher has ever been seen" in banner.text
    page.screenshot("banner")

    stale = beat(name="dispatcher-old", ago=600)
    page.open("/admin/jobs/job/")
    banner = page.find("#dispatcher-banner")
    assert f"The last dispatcher was seen at {stale.last_seen:%Y-%m-%d %H:%M:%S} UTC" in banner.text

    beat(name="dispatcher-host1-101")
    page.open("/admin/")
    assert not page.has("#dispatcher-banner")

    # The dashboard, with a fleet, an hour of lag samples and some outcomes.
    beat("worker", name="worker-host1-202")
    beat("worker", name="worker-host2-303", ago=300)
    now = db_now()
    LagSample.objects.bulk_create(
        LagSample(
            at=now - dt.timedelta(seconds=10 * i),
            lag_seconds=0.05 + (2.5 if 150 <= i < 160 else 0.02 * (i % 7)),
        )
        for i in range(360)
    )
    job = make_job(ann, name="billing-sync", interval_seconds=60)
    states = ["succeeded"] * 40 + ["failed"] * 3 + ["missed"] * 2 + ["succeeded"] * 10
    give_history(job, states, every=60)
    make_run(job, state="pending", ago=2)
    page.open("/admin/dashboard/")
    assert not page.has("#dispatcher-banner")
    fleet = page.find("#fleet").text
    assert "dispatcher-host1-101" in fleet and "worker-host2-303" in fleet
    assert page.find_all("#lag-chart path.lag")
    assert len(page.find_all("#outcome-chart rect")) > 10
    page.screenshot("dashboard")


def test_another_owner_sees_none_of_my_jobs_or_runs_and_gets_not_found(page):
    beat()
    ann, ben = make_owner("ann"), make_owner("ben")
    job = make_job(ann, name="ann-private-job")
    run = give_history(job, ["failed", "succeeded"])[0]
    job_verbs.pause(job, note="ann's maintenance", actor=ann, channel="admin")
    make_job(ben, name="ben-own-job")
    page.log_in("ben")

    for path in ("/admin/jobs/job/", "/admin/runs/run/", "/admin/jobs/jobevent/", "/admin/"):
        page.open(path)
        assert "ann-private-job" not in page.driver.page_source, path
    page.open("/admin/jobs/job/")
    assert "ben-own-job" in page.text

    for path in (
        f"/admin/jobs/job/{job.pk}/change/",
        f"/admin/jobs/job/{job.pk}/delete/",
        f"/admin/jobs/job/{job.pk}/history/",
        f"/admin/runs/run/{run.pk}/change/",
    ):
        page.open(path)
        assert "Not Found" in page.find("h1").text, path
        assert "ann-private-job" not in page.driver.page_source

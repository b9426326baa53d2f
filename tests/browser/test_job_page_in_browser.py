"""A job's page in a real browser: the status header comes first (an active
job, one the system paused after failures or on a 410, one paused with a note
and a resume time), pausing goes through a form (from the job page and from
the list), and rotating the secret asks first. Screenshots go to .screenshots/."""

from __future__ import annotations

import datetime as dt
import zoneinfo

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select

from core.db import db_now
from jobs import crypto
from jobs.models import Job
from runs import job_verbs
from runs.after_attempt import GONE_NOTE
from runs.models import Run
from tests.admin_support import beat, deliver, make_owner, make_run
from tests.factories import make_job

PARIS = zoneinfo.ZoneInfo("Europe/Paris")


def job_page(job: Job) -> str:
    return f"/admin/jobs/job/{job.pk}/change/"


def open_job(page, job: Job):
    """The job's page; returns its status header, checked to be above the form
    and inside the first screen."""
    page.open(job_page(job))
    status = page.find("#job-status")
    assert status.location["y"] < page.find("#job_form").location["y"]
    assert status.location["y"] + status.size["height"] < page.driver.get_window_size()["height"]
    return status


def test_an_active_jobs_header_shows_its_next_fire_and_last_runs_first(page):
    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="billing-sync", cron="*/5 * * * *", timezone="Europe/Paris")
    for k in range(24):
        make_run(job, state="failed" if k == 10 else "succeeded", ago=300 * (24 - k))
    page.log_in("ann")

    status = open_job(page, job)
    headline = page.find("#job-status-headline").text
    assert headline == "Active"
    local = job.next_fire_at.astimezone(PARIS)
    assert "next fire" in status.text and f"{job.next_fire_at:%H:%M:%S} UTC" in status.text
    assert f"{local:%H:%M} Europe/Paris" in status.text
    squares = page.find_all("#job-status-runs .punctual-sq")
    assert len(squares) == 20
    newest = Run.objects.filter(job=job).order_by("-scheduled_at").first()
    assert f"{newest.scheduled_at:%Y-%m-%d %H:%M:%S} UTC · succeeded" in squares[-1].get_attribute(
        "title"
    )
    failed = Run.objects.get(job=job, state="failed")
    assert page.find("#last-failure-link").get_attribute("href").endswith(f"/{failed.pk}/change/")
    page.screenshot("job_page_header_active")

    page.click_and_wait(squares[-1])
    assert f"/admin/runs/run/{newest.pk}/change/" in page.driver.current_url


def test_a_job_paused_after_failures_says_so_at_the_top_and_resumes_from_there(page, receiver_url):
    beat()
    ann = make_owner("ann")
    job = make_job(
        ann,
        name="flaky-hook",
        url=receiver_url("status/500"),
        max_attempts=1,
        pause_after_failures=2,
    )
    deliver(job, times=2)
    page.log_in("ann")

    status = open_job(page, job)
    assert page.find("#job-status-headline").text == (
        "Paused automatically after 2 consecutive failed runs."
    )
    assert "2 failed runs in a row" in status.text
    assert "HTTP 500" in page.find("#last-failure-why").text
    page.screenshot("job_page_header_auto_paused")

    last = Run.objects.filter(job=job).order_by("-scheduled_at").first()
    page.click_and_wait(page.find("#last-failure-link"))
    assert f"/admin/runs/run/{last.pk}/change/" in page.driver.current_url

    page.open(job_page(job))
    page.click_and_wait(page.find("#resume-job"))
    page.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "Resumed"))
    assert page.find("#job-status-headline").text == "Active"
    job.refresh_from_db()
    assert (job.state, job.consecutive_failures) == ("active", 0)


def test_a_job_paused_on_a_410_says_the_target_is_gone(page, receiver_url):
    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="retired-hook", url=receiver_url("status/410"))
    deliver(job)
    page.log_in("ann")

    open_job(page, job)
    assert page.find("#job-status-headline").text == GONE_NOTE
    assert "HTTP 410" in page.find("#last-failure-why").text
    page.screenshot("job_page_header_gone")


def test_owner_pauses_from_the_job_page_with_a_note_and_a_resume_time(page):
    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="nightly-report", cron="0 2 * * *", timezone="Europe/Paris")
    page.log_in("ann")

    open_job(page, job)
    page.click_and_wait(page.find("#pause-job"))
    zone = Select(page.find("#id_zone"))
    assert zone.first_selected_option.text == "Europe/Paris (the job's time zone)"

    # A time in the past is refused next to the box, and nothing changes.
    page.find("#id_note").send_keys("deploy")
    page.find("#id_resume_at").send_keys("2020-01-01 09:00")
    page.click_and_wait(page.find("#confirm-pause"))
    assert "Must be in the future" in page.find(".field-resume_at .errorlist").text
    job.refresh_from_db()
    assert job.state == "active"

    when = (db_now() + dt.timedelta(days=2)).astimezone(PARIS).replace(second=0, microsecond=0)
    box = page.find("#id_resume_at")
    box.clear()
    box.send_keys(f"{when:%Y-%m-%d %H:%M}")
    assert page.find("#id_note").get_attribute("value") == "deploy"  # kept
    page.click_and_wait(page.find("#confirm-pause"))

    page.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "Paused."))
    job.refresh_from_db()
    assert (job.state, job.pause_note, job.resume_at) == ("paused", "deploy", when)
    assert page.find("#job-status-headline").text == "Paused by you: “deploy”"
    status = page.find("#job-status").text
    assert f"resumes at {when.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC" in status
    assert f"{when:%Y-%m-%d %H:%M} Europe/Paris" in status
    page.screenshot("job_page_header_paused_with_note")


def test_the_list_pause_asks_for_a_note_and_a_resume_time(page):
    beat()
    ann = make_owner("ann")
    first = make_job(ann, name="billing-sync")
    second = make_job(ann, name="queue-drain")
    done = make_job(ann, name="old-report")
    job_verbs.pause(done, note="retired")
    page.log_in("ann")

    page.open("/admin/jobs/job/")
    for job in (first, second, done):
        page.find(f"input[name=_selected_action][value='{job.pk}']").click()
    Select(page.find("select[name=action]")).select_by_value("pause_jobs")
    page.click_and_wait(page.find("button[name=index]"))
    assert [li.text for li in page.find_all("#pause-jobs li")] == ["billing-sync", "queue-drain"]
    assert page.find("#already-paused").text == "old-report"
    page.screenshot("jobs_pause_form")

    when = (db_now() + dt.timedelta(hours=3)).replace(second=0, microsecond=0)
    page.find("#id_note").send_keys("database upgrade")
    page.find("#id_resume_at").send_keys(f"{when:%Y-%m-%d %H:%M}")
    assert Select(page.find("#id_zone")).first_selected_option.text == "UTC"
    page.click_and_wait(page.find("#confirm-pause"))
    message = "Paused 2 jobs (1 already paused)."
    page.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), message))
    for job in (first, second):
        job.refresh_from_db()
        assert (job.state, job.pause_note, job.resume_at) == ("paused", "database upgrade", when)
    done.refresh_from_db()
    assert done.pause_note == "retired"


def test_rotating_the_secret_asks_first_then_shows_the_new_one_once(page):
    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="signed-hook")
    old = crypto.decrypt(job.secret_encrypted)
    page.log_in("ann")

    open_job(page, job)
    page.click_and_wait(page.find("#rotate-secret"))
    assert page.has("#rotate-form")
    page.screenshot("job_rotate_confirmation")
    page.click_and_wait(page.driver.find_element(By.LINK_TEXT, "Cancel"))
    job.refresh_from_db()
    assert crypto.decrypt(job.secret_encrypted) == old
    assert not page.has("#new-secret")

    page.click_and_wait(page.find("#rotate-secret"))
    page.click_and_wait(page.find("#confirm-rotate"))
    job.refresh_from_db()
    new = crypto.decrypt(job.secret_encrypted)
    assert new != old
    assert page.find("#secret-value").text == new
    page.driver.refresh()
    page.wait(EC.presence_of_element_located((By.ID, "job-status")))
    assert not page.has("#new-secret")

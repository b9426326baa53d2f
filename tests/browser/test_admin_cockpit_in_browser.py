"""The owner's first screens in a real browser: the "Needs attention" cards
and where their links lead, the runs list's filters (the job picker, the
time spans, the date bar, the run id search) with its "why" in view at
1400 px, and HISTORY opening the job's audit events."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC

from core.db import db_now
from jobs.models import Job
from runs import job_verbs
from tests.admin_support import beat, make_owner, make_run
from tests.factories import make_job


def rows(page) -> list[str]:
    return [row.text for row in page.find_all("#result_list tbody tr")]


def test_the_cards_name_what_needs_attention_and_link_to_exactly_it(page):
    beat()
    ann, ben = make_owner("ann"), make_owner("ben")
    failing = make_job(ann, name="billing-sync")
    Job.objects.filter(pk=failing.pk).update(consecutive_failures=4)
    make_run(failing, state="failed", ago=600, last_status_code=500, last_error="boom")
    gone = make_job(ann, name="crm-push")
    with transaction.atomic():
        job_verbs.pause_by_system(
            gone.pk, note="Paused automatically: the target answered 410 Gone.", now=db_now()
        )
    make_run(make_job(ann, name="nightly-report"), state="missed", ago=3600, reason="past grace")
    make_run(make_job(ann, name="fine"), state="succeeded", ago=60)
    make_job(ben, name="bens-failing", consecutive_failures=2)

    page.log_in("ann")
    page.open("/admin/")
    cards = page.find("#attention").text
    assert "bens-failing" not in cards
    assert "Failing jobs\n1" in cards and "4 failed in a row" in cards
    assert "410 Gone" in page.find("#card-system-paused").text

    page.click_and_wait(page.find("#card-failing .punctual-card-link a"))
    assert "health=failing" in page.driver.current_url
    assert len(rows(page)) == 1 and rows(page)[0].startswith("billing-sync")

    page.open("/admin/dashboard/")
    page.click_and_wait(page.find("#card-system-paused .punctual-card-link a"))
    assert len(rows(page)) == 1 and rows(page)[0].startswith("crm-push")

    page.open("/admin/dashboard/")
    page.click_and_wait(page.find("#card-missed .punctual-card-link a"))
    assert len(rows(page)) == 1 and rows(page)[0].startswith("nightly-report")

    page.open("/admin/dashboard/")
    page.click_and_wait(page.find("#card-failed-runs li a"))
    assert "billing-sync" in page.text and "HTTP 500: boom" in page.text
    page.open("/admin/dashboard/")
    page.click_and_wait(page.find("#card-failed-runs .punctual-card-link a"))
    assert "status=failed" in page.driver.current_url and "within=24h" in page.driver.current_url
    assert len(rows(page)) == 1


def test_the_runs_list_finds_by_job_time_and_id_with_why_in_view_at_1400_px(page):
    beat()
    ann, ben = make_owner("ann"), make_owner("ben")
    nightly = make_job(ann, name="nightly-report")
    sync = make_job(ann, name="billing-sync")
    make_job(ben, name="nightly-for-ben")
    long_error = "upstream refused the call: " + "certificate chain incomplete; " * 8
    for ago in (60, 7200, 4 * 86_400):
        make_run(nightly, state="failed", ago=ago, last_status_code=502, last_error=long_error)
    target = make_run(sync, state="succeeded", ago=120)
    now = db_now()
    make_run(
        sync,
        state="running",
        ago=5,
        lease_owner="worker-host-2-4242",
        lease_until=now + dt.timedelta(seconds=25),
        exclusive=False,
    )
    page.driver.set_window_size(1400, 900)
    page.log_in("ann")

    page.open("/admin/runs/run/")
    results = page.find(".results")
    why = page.find("#result_list thead th.column-why")
    assert why.rect["x"] + why.rect["width"] <= results.rect["x"] + results.rect["width"] + 1
    assert page.driver.execute_script(
        "const r = document.querySelector('.results'); return r.scrollWidth <= r.clientWidth"
    )
    failed_why = [c for c in page.find_all("td.field-why") if "HTTP 502" in c.text]
    assert len(failed_why) == 3
    cell = failed_why[0]
    assert "HTTP 502: upstream refused the call" in cell.text
    assert cell.rect["x"] + cell.rect["width"] <= results.rect["x"] + results.rect["width"] + 1
    assert not page.has("th.column-worker")  # only on the running runs' list

    # The job picker: type, pick, and the list is that job's runs.
    page.find("#job-filter-box .select2-selection").click()
    search = page.wait(
        EC.visibility_of_element_located((By.CSS_SELECTOR, ".select2-search__field"))
    )
    search.send_keys("night")
    # The box first offers every job, then the search's answer: wait for it.
    page.wait(
        lambda d: (
            [o.text for o in page.find_all(".select2-results__option[aria-selected]")]
            == ["nightly-report"]
        )  # never another owner's job
    )
    option = page.find(".select2-results__option[aria-selected]")
    old = page.find("html")
    option.click()
    page.wait_gone(old)
    page.wait(lambda d: f"job__id__exact={nightly.pk}" in d.current_url)
    assert len(rows(page)) == 3 and all("nightly-report" in r for r in rows(page))

    # The time spans, within that job.
    page.click_and_wait(page.driver.find_element(By.LINK_TEXT, "Last 24 hours"))
    assert len(rows(page)) == 2
    page.click_and_wait(page.find("#job-filter-clear"))
    assert "job__id__exact" not in page.driver.current_url and len(rows(page)) == 4

    # The date bar: today.
    page.open("/admin/runs/run/")
    page.click_and_wait(page.driver.find_element(By.LINK_TEXT, "Today"))
    assert f"scheduled_at__day={now.day}" in page.driver.current_url

    # A run by its id.
    page.open("/admin/runs/run/")
    box = page.find("#searchbar")
    box.send_keys(str(target.pk))
    old = page.find("html")
    box.send_keys(Keys.ENTER)
    page.wait_gone(old)
    assert len(rows(page)) == 1 and "billing-sync" in rows(page)[0]

    page.open("/admin/runs/run/?status=running")
    assert page.has("th.column-worker") and "worker-host-2-4242" in page.text


def test_history_opens_the_jobs_events_in_words(page):
    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="nightly-report")
    job_verbs.edit(job, {"timeout_seconds": 45}, actor=ann, channel="admin")
    job.rotate_secret(actor=ann, channel="api")
    make_job(ann, name="other").rotate_secret(actor=ann, channel="api")
    page.log_in("ann")

    page.open(f"/admin/jobs/job/{job.pk}/change/")
    page.click_and_wait(page.driver.find_element(By.LINK_TEXT, "HISTORY"))
    assert f"/admin/jobs/jobevent/?job__id__exact={job.pk}" in page.driver.current_url
    listed = rows(page)
    assert len(listed) == 2
    assert "Secret rotated" in listed[0] and "Edited" in listed[1]
    assert "timeout_seconds: 30 → 45" in listed[1]
    assert "nightly-report" in page.find("#job-filter-box").text

    page.click_and_wait(page.driver.find_element(By.LINK_TEXT, "Edited"))
    assert "action=updated" in page.driver.current_url and len(rows(page)) == 1


def test_the_run_page_reads_summary_then_attempts_and_the_late_filter_leaves_out_backfills(page):
    from tests.admin_support import add_attempt

    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="ledger-sync")
    now = db_now()
    retrying = make_run(job, state="retrying", ago=120, available_at=now + dt.timedelta(seconds=90))
    add_attempt(retrying, outcome="failed", status_code=503, worker="worker-6")
    running = make_run(
        make_job(ann, name="cache-warmup"),
        state="running",
        ago=20,
        lease_owner="worker-7",
        lease_until=now + dt.timedelta(seconds=20),
    )
    add_attempt(running, outcome="failed", status_code=502, worker="worker-5")
    late = make_run(job, state="succeeded", ago=600, lag_seconds=30.0)
    late_backfill = make_run(job, state="succeeded", ago=7200, lag_seconds=5000.0, kind="backfill")
    page.log_in("ann")

    # A retrying run: when its next attempt is, not "available at".
    page.open(f"/admin/runs/run/{retrying.pk}/change/")
    text = page.text
    assert "Next attempt at" in text and "Available at" not in text

    # A running run: the summary, then the attempts, then the lease, folded.
    page.open(f"/admin/runs/run/{running.pk}/change/")
    summary = page.find(".field-job_link")
    attempts = page.find("#attempts-group")
    lease = page.find("details")
    assert summary.location["y"] < attempts.location["y"] < lease.location["y"]
    assert lease.get_attribute("open") is None
    assert "worker-7" not in lease.text  # folded: the lease's details are not shown
    lease.find_element(By.TAG_NAME, "summary").click()
    page.wait(lambda d: "worker-7" in page.find("details").text)

    # Late: the late scheduled run, not the backfill.
    page.open("/admin/runs/run/?status=late")
    links = [a.get_attribute("href") for a in page.find_all("#result_list tbody th a")]
    assert any(str(late.pk) in href for href in links), links
    assert not any(str(late_backfill.pk) in href for href in links), links

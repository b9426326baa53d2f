"""Demo mode in a real browser: an owner points a job at the demo's catch-all
receiver, switches it to fail (``?status=500``) and then to be slow
(``?delay=``) by editing the job's URL in the admin, sends a test delivery
each time, and watches the run fail on its page."""

from __future__ import annotations

from selenium.webdriver.common.by import By

from dispatch.worker import Worker
from jobs.models import Job
from runs.models import Run
from tests.admin_support import beat, make_owner
from tests.factories import make_job


def switch_url_and_send_a_test_delivery(page, job: Job, url: str) -> Run:
    """Edit the job's URL in its form, save, press "Send test delivery",
    deliver the run with a real worker, and return it once its page says it failed."""
    page.open(f"/admin/jobs/job/{job.pk}/change/")
    field = page.find("#id_url")
    field.clear()
    field.send_keys(url)
    page.click_and_wait(page.find("input[name=_continue]"))
    assert Job.objects.get(pk=job.pk).url == url
    page.click_and_wait(page.find("#test-delivery"))
    assert page.has("#watching")  # the run page, following the run
    run_id = page.driver.current_url.split("/admin/runs/run/")[1].split("/")[0]
    # The worker of demo mode: loopback targets only (jobs/targets.py).
    assert Worker(concurrency=5).run_once() == 1
    # The page reloads itself until the run has finished.
    page.wait(lambda d: not d.find_elements(By.ID, "watching"))
    assert "Failed" in page.text
    return Run.objects.get(pk=run_id)


def test_switching_the_demo_receiver_in_a_job_url_shows_a_failed_run(page, live_server, settings):
    settings.DEBUG = True  # the demo receiver answers only then
    settings.PUNCTUAL_DEMO = True
    beat()
    ann = make_owner("ann")
    receiver = f"{live_server.url}/demo/receiver/my-first-job"
    job = make_job(ann, name="my-first-job", url=receiver, max_attempts=1, timeout_seconds=1)
    page.log_in("ann")
    page.open("/admin/jobs/job/")
    assert "Demo mode." in page.find("#demo-banner").text

    failed = switch_url_and_send_a_test_delivery(page, job, f"{receiver}?status=500")
    assert (failed.state, failed.last_status_code) == ("failed", 500)
    assert "500" in page.text
    page.screenshot("demo_receiver_500_run")

    slow = switch_url_and_send_a_test_delivery(page, job, f"{receiver}?delay=3")
    assert (slow.state, slow.last_status_code, slow.last_error) == (
        "failed",
        None,
        "timed out after 1 s",
    )
    assert "timed out after 1 s" in page.text

    # The receiver's page lists both deliveries with what it answered.
    page.open("/demo/")
    answers = [cell.text for cell in page.find_all("td.answer")]
    assert sorted(answers) == ["200", "500"], answers
    page.screenshot("demo_receiver_deliveries")

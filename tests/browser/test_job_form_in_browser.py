"""The job form's script in a real browser: the live schedule preview (words,
next fires in the job's zone and in UTC, warnings, inline errors) fed by the
API through the admin session, and the max catch-up row that follows the
misfire policy."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select

from tests.admin_support import beat, make_owner
from tests.factories import make_job

PREVIEW = "#schedule-preview"


def preview_says(page, text: str) -> None:
    page.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, PREVIEW), text))


def set_value(page, css: str, text: str) -> None:
    box = page.find(css)
    box.clear()
    box.send_keys(text)


def test_typing_a_cron_previews_its_words_and_next_fires(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    page.open("/admin/jobs/job/add/")
    preview_says(page, "Enter a cron, an interval or a run at time")

    set_value(page, "#id_interval_seconds", "")
    set_value(page, "#id_cron", "15 9 * * 1-5")
    preview_says(page, "At 09:15, Monday through Friday, UTC")
    rows = page.find_all(f"{PREVIEW} table tbody tr")
    assert len(rows) == 5
    local, utc = (cell.text for cell in rows[0].find_elements(By.TAG_NAME, "td"))
    assert "09:15:00 UTC+00:00" in local and utc.endswith("09:15:00 UTC")
    assert local[:3] in ("Mon", "Tue", "Wed", "Thu", "Fri")

    # A zone change re-reads the same cron in that zone.
    set_value(page, "#id_timezone", "Asia/Kolkata")
    preview_says(page, "At 09:15, Monday through Friday, Asia/Kolkata")
    page.wait(
        lambda d: (
            "UTC+05:30" in page.find(f"{PREVIEW} table tbody tr").text
            and "03:45:00 UTC" in page.find(f"{PREVIEW} table tbody tr").text
        )
    )
    assert page.find(f"{PREVIEW} table th").get_attribute("textContent") == "in Asia/Kolkata"

    # So does an interval, with a start (read in UTC).
    set_value(page, "#id_cron", "")
    set_value(page, "#id_interval_seconds", "5400")
    set_value(page, "#id_start_at_0", "2031-05-01")
    set_value(page, "#id_start_at_1", "08:00:00")
    preview_says(page, "every 90 minutes")
    page.wait(lambda d: "2031-05-01 09:30:00 UTC" in page.find(f"{PREVIEW} table").text)
    page.screenshot("job_form_preview")


def test_an_invalid_cron_shows_its_error_inline_before_saving(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    page.open("/admin/jobs/job/add/")
    set_value(page, "#id_interval_seconds", "")
    set_value(page, "#id_cron", "61 * * * *")
    error = page.wait(EC.visibility_of_element_located((By.ID, "live-error-cron")))
    assert "61" in error.text
    # Next to its field, inside the cron's row.
    assert error.find_element(By.XPATH, "./ancestor::div[contains(@class, 'field-cron')]")
    preview_says(page, "Not a valid schedule yet")
    assert page.driver.current_url.endswith("/admin/jobs/job/add/")  # nothing was saved

    set_value(page, "#id_cron", "0 * * * *")
    preview_says(page, "Every hour, UTC")
    assert not page.has("#live-error-cron")

    set_value(page, "#id_timezone", "Mars/Olympus")
    error = page.wait(EC.visibility_of_element_located((By.ID, "live-error-timezone")))
    assert "Not a valid time zone" in error.text


def test_a_cron_in_a_daylight_saving_gap_shows_the_warning(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    page.open("/admin/jobs/job/add/")
    set_value(page, "#id_interval_seconds", "")
    set_value(page, "#id_timezone", "Europe/Berlin")
    set_value(page, "#id_cron", "30 2 * * *")
    page.wait(EC.presence_of_element_located((By.CSS_SELECTOR, f"{PREVIEW} .punctual-warnings")))
    warnings = page.find(f"{PREVIEW} .punctual-warnings").text
    assert "02:30 does not exist in Europe/Berlin" in warnings
    assert "happens twice" in warnings

    # A time outside the change's hours has no warning.
    set_value(page, "#id_cron", "0 9 * * *")
    preview_says(page, "At 09:00, Europe/Berlin")
    assert not page.has(f"{PREVIEW} .punctual-warnings")


def test_a_jobs_page_previews_an_edit(page):
    beat()
    ann = make_owner("ann")
    job = make_job(ann, name="nightly", cron="0 2 * * *", interval_seconds=None)
    page.log_in("ann")
    page.open(f"/admin/jobs/job/{job.pk}/change/")
    preview_says(page, "Edit the schedule to preview it here")
    set_value(page, "#id_cron", "0 3 * * *")
    preview_says(page, "At 03:00, UTC")


def test_max_catchup_shows_only_under_the_catch_up_policy(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    page.open("/admin/jobs/job/add/")
    row = page.find(".form-row.field-max_catchup")
    assert (
        Select(page.find("#id_misfire_policy")).first_selected_option.get_attribute("value")
        == "skip"
    )
    assert not row.is_displayed()
    Select(page.find("#id_misfire_policy")).select_by_value("catch_up")
    page.wait(lambda d: row.is_displayed())
    Select(page.find("#id_misfire_policy")).select_by_value("skip")
    page.wait(lambda d: not row.is_displayed())


def test_a_one_off_time_and_an_end_are_previewed_and_refused_inline(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    page.open("/admin/jobs/job/add/")
    set_value(page, "#id_interval_seconds", "")
    set_value(page, "#id_timezone", "Europe/Berlin")
    set_value(page, "#id_run_at_0", "2031-05-01")
    set_value(page, "#id_run_at_1", "08:00:00")
    preview_says(page, "once, at 2031-05-01 10:00 (Europe/Berlin)")
    rows = page.find_all(f"{PREVIEW} table tbody tr")
    assert len(rows) == 1 and "2031-05-01 08:00:00 UTC" in rows[0].text

    # An end before the one fire: refused next to the end, before saving.
    set_value(page, "#id_end_at_0", "2031-05-01")
    set_value(page, "#id_end_at_1", "07:00:00")
    error = page.wait(EC.visibility_of_element_located((By.ID, "live-error-end_at")))
    assert "after run_at" in error.text
    assert error.find_element(By.XPATH, "./ancestor::div[contains(@class, 'field-end_at')]")

    # A cron with an end: its fires stop there.
    set_value(page, "#id_run_at_0", "")
    set_value(page, "#id_run_at_1", "")
    set_value(page, "#id_cron", "0 9 * * *")
    set_value(page, "#id_end_at_0", "2031-05-03")
    set_value(page, "#id_end_at_1", "07:00:00")
    preview_says(page, "until 2031-05-03 09:00 (Europe/Berlin)")
    page.screenshot("job_form_preview_end")

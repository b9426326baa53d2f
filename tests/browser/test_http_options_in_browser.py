"""The job form's method, body, extra headers and authentication in a real
browser (docs/guides/owners.md "Calling any HTTP endpoint"): the credential
boxes follow the authentication kind, a bad value comes back as an error on
its box with nothing saved, and the saved job's page shows the header names
with their values masked, and never a secret."""

from __future__ import annotations

from selenium.webdriver.support.ui import Select

from jobs import http_options
from jobs.models import Job
from tests.admin_support import beat, make_owner

TOKEN = "tok-browser-31c7-never-shown"
VALUE = "hv-browser-8d02-never-shown"


def set_value(page, css: str, text: str) -> None:
    box = page.find(css)
    box.clear()
    box.send_keys(text)


def fill_cron_php_job(page) -> None:
    set_value(page, "#id_name", "cron.php")
    set_value(page, "#id_interval_seconds", "300")
    set_value(page, "#id_url", "https://93.184.215.14/cron.php?key=abc")
    Select(page.find("#id_method")).select_by_value("GET")
    set_value(page, "#id_headers", f"X-Api-Key: {VALUE}")


def test_a_get_job_with_a_bearer_token_is_saved_and_its_secrets_never_shown(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    page.open("/admin/jobs/job/add/")
    token_row = page.find(".form-row.field-auth_token")
    user_row = page.find(".form-row.field-auth_username")
    assert not token_row.is_displayed() and not user_row.is_displayed()
    fill_cron_php_job(page)
    Select(page.find("#id_auth_kind")).select_by_value("bearer")
    page.wait(lambda d: token_row.is_displayed())
    assert not user_row.is_displayed()
    set_value(page, "#id_auth_token", TOKEN)
    page.find(".form-row.field-method").location_once_scrolled_into_view  # noqa: B018
    page.screenshot("job_form_http_options")

    page.click_and_wait(page.find("input[name=_continue]"))
    job = Job.objects.get(name="cron.php")
    assert (job.method, job.body_mode, job.auth_kind) == ("GET", "none", "bearer")
    assert http_options.unseal(job.auth_encrypted) == {"auth_token": TOKEN}
    assert http_options.unseal(job.headers_encrypted) == {"X-Api-Key": VALUE}

    # The job's page: the header's name, its value masked, no secret in it.
    assert page.find("#id_headers").get_attribute("value") == "X-Api-Key: ••••••"
    assert page.find("#id_auth_token").get_attribute("value") == ""
    source = page.driver.page_source
    assert TOKEN not in source and VALUE not in source
    assert Select(page.find("#id_body_mode")).first_selected_option.get_attribute("value") == (
        "none"
    )
    page.screenshot("job_page_http_options")


def test_a_bad_credential_is_an_error_on_its_box_and_nothing_is_saved(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    page.open("/admin/jobs/job/add/")
    fill_cron_php_job(page)
    set_value(page, "#id_headers", "Host: example.com")
    Select(page.find("#id_auth_kind")).select_by_value("basic")
    set_value(page, "#id_auth_username", "robot:1")
    set_value(page, "#id_auth_password", "secret")
    page.click_and_wait(page.find("input[name=_save]"))

    assert not Job.objects.filter(name="cron.php").exists()
    headers_row = page.find(".form-row.field-headers")
    assert "Reserved header: Host" in headers_row.text
    user_row = page.find(".form-row.field-auth_username")
    assert user_row.is_displayed() and "no colon" in user_row.text
    # A secret typed is never sent back into the page, even with errors.
    assert page.find("#id_auth_password").get_attribute("value") == ""
    page.screenshot("job_form_http_options_errors")

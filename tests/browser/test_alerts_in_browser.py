"""Alert channels in a real browser (docs/guides/alerts.md): adding one shows
its URL once and only its mask afterwards, a refused URL is named on its
field, the test alert action queues an alert, and a job's page offers the
owner's channels and shows its recent alerts. Screenshots go to .screenshots/."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select

from alerts.models import Alert, Channel
from jobs import crypto
from tests.admin_support import beat, make_owner
from tests.factories import make_job

PUBLIC = "json://93.184.216.34:8080/hooks/punctual?token=s3cr3t"
MASK = "json://93.184.216.34:8080/…"


def add_channel(page, name: str, url: str) -> None:
    page.open("/admin/alerts/channel/add/")
    page.find("#id_name").send_keys(name)
    page.find("#id_url").send_keys(url)
    page.click_and_wait(page.find("input[name=_save]"))


def test_a_new_channel_shows_its_url_once_then_only_its_mask(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    add_channel(page, "on-call", PUBLIC)
    assert PUBLIC in page.find(".new-secret").text
    page.screenshot("alert_channel_added_url_shown_once")

    page.driver.refresh()
    page.wait(lambda d: d.execute_script("return document.readyState") == "complete")
    assert not page.has(".new-secret")
    assert PUBLIC not in page.text and MASK in page.text
    page.screenshot("alert_channel_page_masked")

    page.open("/admin/alerts/channel/")
    assert MASK in page.text and "s3cr3t" not in page.text
    page.screenshot("alert_channels_list")


def test_a_channel_to_a_private_address_is_refused_on_its_field(page):
    beat()
    make_owner("ann")
    page.log_in("ann")
    add_channel(page, "internal", "json://10.0.0.5/alerts")
    error = page.find(".field-url .errorlist").text
    assert "non-public address (10.0.0.5)" in error
    assert not Channel.objects.exists()
    page.screenshot("alert_channel_refused_private_address")


def test_send_test_alert_queues_one_for_a_worker_and_the_alerts_list_shows_it(page):
    beat()
    ann = make_owner("ann")
    channel = Channel.objects.create(
        owner=ann, name="on-call", url_encrypted=crypto.encrypt(PUBLIC), masked=MASK
    )
    page.log_in("ann")
    page.open("/admin/alerts/channel/")
    page.find(f"input[name=_selected_action][value='{channel.pk}']").click()
    Select(page.find("select[name=action]")).select_by_value("send_test_alert")
    page.click_and_wait(page.find("button[name=index]"))
    page.wait(
        EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".messagelist"), "Queued 1 test alert")
    )
    assert Alert.objects.get(channel=channel).kind == "test"
    page.screenshot("alert_channel_test_alert_queued")

    page.open("/admin/alerts/alert/")
    assert "test alert" in page.text and "Pending" in page.text
    page.screenshot("alerts_list")


def test_a_job_page_offers_the_owner_s_channels_and_shows_its_recent_alerts(page):
    beat()
    ann = make_owner("ann")
    ben = make_owner("ben")
    mine = Channel.objects.create(
        owner=ann, name="on-call", url_encrypted=crypto.encrypt(PUBLIC), masked=MASK
    )
    Channel.objects.create(
        owner=ben, name="bens-pager", url_encrypted=crypto.encrypt(PUBLIC), masked=MASK
    )
    job = make_job(ann, name="billing-sync", url="https://93.184.215.14/hook")
    for kind, count, state, error in [
        ("failed", 5, "sent", ""),
        ("recovered", 1, "pending", "A Connection error occurred sending JSON notification"),
    ]:
        Alert.objects.create(
            channel=mine,
            job=job,
            kind=kind,
            count=count,
            state=state,
            attempts=1,
            last_error=error,
            detail="HTTP 500 Internal Server Error",
            due_at=job.created_at,
            next_attempt_at=job.created_at,
        )
    page.log_in("ann")
    page.open(f"/admin/jobs/job/{job.pk}/change/")
    choices = page.find("#id_alert_channels").text
    assert "on-call" in choices and "bens-pager" not in choices
    table = page.find("#recent-alerts").text
    assert "run failed" in table and "recovered" in table
    page.driver.execute_script("arguments[0].scrollIntoView()", page.find("#recent-alerts"))
    page.screenshot("job_page_alerts")

    page.find(f"#id_alert_channels input[value='{mine.pk}']").click()
    page.click_and_wait(page.find("input[name=_continue]"))
    page.wait(EC.presence_of_element_located((By.CSS_SELECTOR, ".messagelist")))
    assert page.find(f"#id_alert_channels input[value='{mine.pk}']").is_selected()

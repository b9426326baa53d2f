"""Demo mode (PUNCTUAL_DEMO=true, ``make run``) through the API: webhooks may
target loopback addresses, and every other private address is refused with
the usual 400, even when PUNCTUAL_ALLOW_PRIVATE_TARGETS is true."""

from __future__ import annotations

import pytest

from jobs.models import Job

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


@pytest.fixture(params=[False, True], ids=["private-off", "private-on"])
def demo_mode(request, settings):
    """Demo mode, with PUNCTUAL_ALLOW_PRIVATE_TARGETS off and on: on, it is narrowed."""
    settings.PUNCTUAL_DEMO = True
    settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS = request.param
    return settings


def create(api, url: str):
    return api.post(JOBS, {"name": "mine", "interval_seconds": 60, "url": url}, format="json")


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://10.0.0.1/hook", "10.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://192.168.1.1/", "192.168.1.1"),
        ("http://[fd00::1]/", "fd00::1"),
    ],
)
def test_demo_mode_refuses_private_addresses_with_the_usual_400(api, demo_mode, url, address):
    answer = create(api, url)
    assert answer.status_code == 400, answer.content
    assert answer.json() == {"url": [f"URL host is a non-public address ({address})"]}
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/demo/receiver/?status=500",
        "http://localhost:8000/demo/receiver/",
        "http://[::1]:8000/demo/receiver/",
    ],
)
def test_demo_mode_accepts_loopback_targets(api, demo_mode, url):
    answer = create(api, url)
    assert answer.status_code == 201, answer.content
    assert Job.objects.get().url == url


def test_without_demo_mode_loopback_is_refused_as_before(api, settings):
    settings.PUNCTUAL_DEMO = False
    answer = create(api, "http://127.0.0.1:8000/demo/receiver/")
    assert answer.status_code == 400
    assert answer.json() == {"url": ["URL host is a non-public address (127.0.0.1)"]}

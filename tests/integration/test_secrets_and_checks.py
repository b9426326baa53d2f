"""Secrets at rest fail closed; settings that correctness depends on are checked."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.test import override_settings

from dispatch.worker import Worker
from jobs import crypto
from runs import job_verbs
from runs.models import Run
from scheduler_site.checks import utc_everywhere
from tests.factories import make_job


@pytest.mark.django_db
def test_secret_is_stored_encrypted_and_decrypts_with_the_configured_key(owner):
    job = make_job(owner)
    secret = crypto.decrypt(job.secret_encrypted)
    assert secret.startswith("whsec_") and secret not in job.secret_encrypted


@pytest.mark.django_db
def test_a_secret_that_cannot_be_decrypted_is_never_sent_unsigned(owner):
    job = make_job(owner, url="http://127.0.0.1:9/never-reached", max_attempts=3)
    run = job_verbs.trigger(job)
    with override_settings(
        PUNCTUAL_ENCRYPTION_KEYS=[Fernet.generate_key().decode()],
        PUNCTUAL_ALLOW_PRIVATE_TARGETS=True,
    ):
        assert Worker(concurrency=5, lease_seconds=5).run_once() == 1
    run = Run.objects.get(pk=run.pk)
    # Permanent at once: nothing was attempted on the wire, and no retry would help.
    assert (run.state, run.attempt) == ("failed", 1)
    assert "decrypt" in run.last_error


@pytest.mark.django_db
def test_rotated_keys_still_decrypt_old_secrets(owner):
    job = make_job(owner)
    secret = crypto.decrypt(job.secret_encrypted)
    new_key = Fernet.generate_key().decode()
    with override_settings(PUNCTUAL_ENCRYPTION_KEYS=[new_key, crypto._derived_key().decode()]):
        assert crypto.decrypt(job.secret_encrypted) == secret


def test_system_check_requires_utc_and_use_tz():
    assert utc_everywhere(None) == []
    with override_settings(TIME_ZONE="Europe/Berlin"):
        assert [e.id for e in utc_everywhere(None)] == ["punctual.E002"]
    with override_settings(USE_TZ=False):
        assert [e.id for e in utc_everywhere(None)] == ["punctual.E001"]

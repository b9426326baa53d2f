"""A new secret, shown once: a job's on the page after the job was created,
or after its secret was rotated; an alert channel's URL on the page after it
was saved (console/alert_admin.py, through stash() and pop()).

The secret waits in the session between the POST that made it and the page
that shows it, which removes it. It is kept encrypted like the stored one
(jobs/crypto.py): sessions live in the database too.
"""

from __future__ import annotations

from jobs import crypto
from jobs.models import Job

NEW_SECRETS_SESSION_KEY = "punctual.new_secrets"

# Shown with the secret: how a receiver checks a delivery's signature.
VERIFY_SNIPPET = '''\
# pip install standardwebhooks
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

webhook = Webhook("{secret}")


def verify(body: bytes, headers: dict[str, str]) -> dict:
    """The delivery's JSON once its signature checks out.

    Raises WebhookVerificationError for a forged, altered or stale delivery.
    In Django: verify(request.body, dict(request.headers)).
    """
    event = webhook.verify(body, headers)
    # Every retry of one fire carries the same event["data"]["run_id"]:
    # de-duplicate on it before acting, and a retry never acts twice.
    return event
'''


def stash(request, session_key: str, pk: object, value: str) -> None:
    """Keep ``value`` (encrypted) in the session under ``session_key`` for the
    object ``pk``, until pop() shows it once."""
    kept = request.session.get(session_key, {})
    kept[str(pk)] = crypto.encrypt(value)
    request.session[session_key] = kept


def pop(request, session_key: str, pk: object) -> str | None:
    """The value stash() kept for ``pk``, removed from the session; None when
    there is none (it was shown already)."""
    kept = request.session.get(session_key, {})
    token = kept.pop(str(pk), None)
    if token is None:
        return None
    request.session[session_key] = kept
    return crypto.decrypt(token)


def stash_secret(request, job: Job, secret: str) -> None:
    stash(request, NEW_SECRETS_SESSION_KEY, job.pk, secret)


def pop_secret(request, job: Job) -> str | None:
    return pop(request, NEW_SECRETS_SESSION_KEY, job.pk)

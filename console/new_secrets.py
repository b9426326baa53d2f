"""A job's new secret, shown once: on the page after the job was created, or
after its secret was rotated.

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


def stash_secret(request, job: Job, secret: str) -> None:
    secrets = request.session.get(NEW_SECRETS_SESSION_KEY, {})
    secrets[str(job.pk)] = crypto.encrypt(secret)
    request.session[NEW_SECRETS_SESSION_KEY] = secrets


def pop_secret(request, job: Job) -> str | None:
    secrets = request.session.get(NEW_SECRETS_SESSION_KEY, {})
    token = secrets.pop(str(job.pk), None)
    if token is None:
        return None
    request.session[NEW_SECRETS_SESSION_KEY] = secrets
    return crypto.decrypt(token)

"""Stored Idempotency-Key answers hold no secret any more (jobs/idempotency.py).

The rows written before kept a create's answer whole, secret included
(encrypted). Each is rewritten as new rows are: the secret taken out, and
the digest of the job's stored secret kept in its place, but only when that
secret is still the one the answer gave; otherwise a digest that matches
nothing, so a replay answers 409 as after a rotation. A row that the
configured keys cannot decrypt is deleted (it could never be replayed).
"""

import json

from django.db import migrations, models


def strip_stored_secrets(apps, schema_editor):
    from jobs import crypto, idempotency

    IdempotencyKey = apps.get_model("jobs", "IdempotencyKey")
    Job = apps.get_model("jobs", "Job")
    for row in IdempotencyKey.objects.exclude(response_encrypted="").iterator():
        try:
            data = json.loads(crypto.decrypt(row.response_encrypted))
        except crypto.SecretUnavailable:
            row.delete()
            continue
        data, secrets = idempotency.split_secrets(data)
        if not secrets:
            continue
        jobs = Job.objects.filter(pk__in=list(secrets)).values_list("pk", "secret_encrypted")
        tokens = {str(pk): token for pk, token in jobs}
        row.secret_digests = {
            job_id: _digest_if_current(tokens.get(job_id, ""), secret)
            for job_id, secret in secrets.items()
        }
        row.response_encrypted = crypto.encrypt(json.dumps(data))
        row.save(update_fields=["secret_digests", "response_encrypted"])


def _digest_if_current(token, secret):
    """The digest a new row would keep, if ``token`` still holds ``secret``."""
    from jobs import crypto, idempotency

    try:
        current = bool(token) and crypto.decrypt(token) == secret
    except crypto.SecretUnavailable:
        current = False
    return idempotency.token_digest(token) if current else ""


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0007_owner_limits_and_backfill_uses'),
    ]

    operations = [
        migrations.AddField(
            model_name='idempotencykey',
            name='secret_digests',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(strip_stored_secrets, migrations.RunPython.noop),
    ]

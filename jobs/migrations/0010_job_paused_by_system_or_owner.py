"""Who paused a job, by channel (``Job.paused_by``): the admin tells an
automatic pause ("Paused (auto)") from an owner's.

Jobs paused before the column existed get ``system`` when their note is one
that only the automatic pause writes (runs/after_attempt.py), and stay empty
(an owner's pause) otherwise.
"""

from django.db import migrations, models


def mark_automatic_pauses(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    Job.objects.filter(state="paused", pause_note__startswith="Paused automatically").update(
        paused_by="system"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0009_job_payload_read_at_any_depth"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="paused_by",
            field=models.CharField(
                blank=True,
                choices=[("admin", "Admin"), ("api", "API"), ("system", "System")],
                default="",
                db_default="",
                max_length=10,
            ),
        ),
        migrations.RunPython(mark_automatic_pauses, migrations.RunPython.noop),
    ]

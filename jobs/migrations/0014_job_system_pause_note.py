"""The system's reason for pausing a job (``Job.system_pause_note``), kept
while the job stays paused: an owner's pause over the system's adds the
owner's note (``pause_note``) and leaves ``paused_by`` as ``system``, so the
job stays in "Paused by the system" with its reason until a resume
(docs/concepts/pause-and-resume.md "Paused by the system").

Jobs the system paused get their note as the system's reason. A job paused
for an unreadable schedule was left without ``paused_by`` before (the verb
did not write it); its note, which only that pause writes, marks it now.
"""

from django.db import migrations, models
from django.db.models import F, Q


def keep_system_reasons(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    Job.objects.filter(
        Q(paused_by="system")
        | Q(pause_note__startswith="paused by the system: its schedule cannot be read"),
        state="paused",
    ).update(paused_by="system", system_pause_note=F("pause_note"))


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_job_tags"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="system_pause_note",
            field=models.CharField(
                blank=True, db_default="", default="", editable=False, max_length=500
            ),
        ),
        migrations.RunPython(keep_system_reasons, migrations.RunPython.noop),
    ]

"""A job's ``parked_since`` (docs/concepts/misfire-and-overlap.md "Parked
while its run is active"): the first fire an interval job under overlap
``skip`` declined while its run was active, set by the dispatcher's fast path
while the job is parked (its ``next_fire_at`` NULL), cleared when that run
ends (runs/migrations/0014). Existing jobs are not parked: NULL, a catalogue
change with no rewrite.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0016_job_end_at_and_one_off_run_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="parked_since",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]

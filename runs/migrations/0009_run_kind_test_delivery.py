"""The run kind ``test``: the admin's "Send test delivery" (one attempt,
outside the job's failure streak). Choices only: no SQL."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0008_run_last_response"),
    ]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="kind",
            field=models.CharField(
                choices=[
                    ("scheduled", "Scheduled"),
                    ("catch_up", "Catch-up"),
                    ("backfill", "Backfill"),
                    ("manual", "Manual"),
                    ("test", "Test delivery"),
                ],
                default="scheduled",
                max_length=10,
            ),
        ),
    ]

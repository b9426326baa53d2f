"""Runs and attempts keep the receiver's answer apart from the error.

``last_error`` held a success's response excerpt too; now it stays empty on
success and the answer goes to ``Run.last_response`` / ``Attempt.response``.
Both tables are partitioned by day: ``ALTER TABLE ... ADD COLUMN`` on the
parent adds the column to every partition, and a constant default makes it a
catalogue change, with no rewrite of the existing rows. The database default
stays, so the set-based inserts that do not name the column still work.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_run_owner_for_fair_claims"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="response",
            field=models.TextField(blank=True, db_default="", default="", max_length=500),
        ),
        migrations.AddField(
            model_name="run",
            name="last_response",
            field=models.TextField(blank=True, db_default="", default="", max_length=500),
        ),
    ]

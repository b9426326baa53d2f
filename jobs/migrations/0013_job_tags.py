"""A job's tags (jobs/tags.py): short labels, stored as a varchar(40) array.

Existing jobs get no tags (the column's default, ``'{}'``, also serves the
raw inserts that name no tags). A GIN index serves the lists' ``?tag=``
filter (``tags @> ARRAY[...]``), and a CHECK keeps the count at 10 whatever
writes the row; each tag's form is checked where it comes in, by the API's
serializer and the admin's form.
"""

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0012_retry_uses"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="tags",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=40),
                blank=True,
                db_default=[],
                default=list,
                size=None,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=django.contrib.postgres.indexes.GinIndex(fields=["tags"], name="job_tags_idx"),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("tags__len__lte", 10)), name="job_at_most_10_tags"
            ),
        ),
    ]

# DeliveryStat moved to the runs app (runs/stats.py writes it). The table stays;
# runs/migrations/0003_deliverystat takes it over and renames it.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('dispatch', '0002_deliverystat_demodelivery'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='DeliveryStat')],
            database_operations=[],
        ),
    ]

# DeliveryStat moved here from the dispatch app: take over its table
# (dispatch_deliverystat, rows kept: the counters must only go up), then give
# it this app's name.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dispatch', '0002_deliverystat_demodelivery'),
        ('runs', '0002_run_job_fk_without_constraint'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='DeliveryStat',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('shard', models.PositiveSmallIntegerField()),
                        ('outcome', models.CharField(max_length=15)),
                        ('bucket', models.SmallIntegerField()),
                        ('deliveries', models.BigIntegerField(default=0)),
                        ('duration_ms', models.BigIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'dispatch_deliverystat',
                        'constraints': [models.UniqueConstraint(fields=('shard', 'outcome', 'bucket'), name='deliverystat_one_row_per_counter')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name='deliverystat', table=None),
    ]

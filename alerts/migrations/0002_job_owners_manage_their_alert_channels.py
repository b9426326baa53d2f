"""The "Job owners" group (jobs/migrations/0002_job_owners_group) may add,
change, delete and view alert channels, and view alerts: the admin narrows
both lists to the owner's own.

The permission list is frozen here, as a migration must keep meaning the
same thing when the code moves on.
"""

from django.db import migrations

GROUP_NAME = "Job owners"

PERMISSIONS = ["add_channel", "change_channel", "delete_channel", "view_channel", "view_alert"]


def grant(apps, schema_editor):
    # On a fresh database the permissions do not exist yet: Django creates
    # them in post_migrate, after every migration. Create them now.
    from django.contrib.auth.management import create_permissions

    alias = schema_editor.connection.alias
    app_config = apps.get_app_config("alerts")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0, using=alias)
    app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.using(alias).get_or_create(name=GROUP_NAME)
    perms = Permission.objects.using(alias).filter(
        content_type__app_label="alerts", codename__in=PERMISSIONS
    )
    group.permissions.add(*perms)


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    alias = schema_editor.connection.alias
    group = Group.objects.using(alias).filter(name=GROUP_NAME).first()
    if group is not None:
        group.permissions.remove(
            *Permission.objects.using(alias).filter(
                content_type__app_label="alerts", codename__in=PERMISSIONS
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0001_channels_and_alert_ledger"),
        ("jobs", "0002_job_owners_group"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant, revoke)]

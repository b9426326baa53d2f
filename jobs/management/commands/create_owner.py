"""``manage.py create_owner USERNAME [--password P] [--superuser]``

Creates a job owner who can use the admin and the API: a staff user in the
"Job owners" group (whose permissions a migration sets), with an API token. The
token's key is the last line of the output, so a script can take it with
``tail -1``; it is shown this once (only its digest is stored).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction

from accounts import tokens

OWNERS_GROUP = "Job owners"


class Command(BaseCommand):
    help = "Create a job owner (admin and API access) and print their API token last."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--password",
            help="Admin password. Without it the owner can use the API only, until "
            "`manage.py changepassword` sets one.",
        )
        parser.add_argument(
            "--superuser", action="store_true", help="Sees and changes every owner's jobs."
        )

    def handle(self, *args, username: str, password: str | None, superuser: bool, **options):
        user, key = create_owner(username, password=password, superuser=superuser)
        kind = "superuser" if superuser else "owner"
        self.stdout.write(f"Created {kind} {user.username!r} in the {OWNERS_GROUP!r} group.")
        if password is None:
            self.stdout.write("No password set: API access only until one is set.")
        self.stdout.write(key)


def create_owner(username: str, *, password: str | None, superuser: bool):
    """Validate everything first, then create the user, group membership and
    token in one transaction: a failure leaves nothing behind. Returns the
    user and the token's key."""
    User = get_user_model()
    username = username.strip()
    try:
        User._meta.get_field("username").run_validators(username)
        if not username:
            raise ValidationError("The username must not be empty.")
    except ValidationError as exc:
        raise CommandError(f"Invalid username {username!r}: {' '.join(exc.messages)}") from None
    if User.objects.filter(username=username).exists():
        raise CommandError(f"A user named {username!r} already exists.")
    user = User(username=username, is_staff=True, is_superuser=superuser)
    if password is not None:
        try:
            password_validation.validate_password(password, user)
        except ValidationError as exc:
            raise CommandError(f"Invalid password: {' '.join(exc.messages)}") from None
    if password is None:
        user.set_unusable_password()
    else:
        user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
            group, _ = Group.objects.get_or_create(name=OWNERS_GROUP)
            user.groups.add(group)
            _, key = tokens.issue(user)
    except IntegrityError:
        # Another create_owner took the name between our check and our insert.
        raise CommandError(f"A user named {username!r} already exists.") from None
    return user, key

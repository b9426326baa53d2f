"""``manage.py create_owner``: an owner who can use the admin and the API, with
the token as the last line of output."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from accounts import tokens
from accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def create_owner(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("create_owner", *args, stdout=out)
    return out.getvalue().splitlines()


def test_creates_a_staff_owner_in_the_group_and_prints_the_token_last():
    lines = create_owner("carol", "--password", "a-long-password-1")
    user = get_user_model().objects.get(username="carol")
    assert user.is_staff and not user.is_superuser
    assert list(user.groups.values_list("name", flat=True)) == ["Job owners"]
    assert user.check_password("a-long-password-1")
    assert tokens.key_matches(user, lines[-1])
    # Only the digest is stored: the key appears in no column of the row.
    assert lines[-1] not in str(list(ApiToken.objects.filter(user=user).values_list()))

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {lines[-1]}")
    assert client.get("/api/v1/jobs/").status_code == 200


def test_superuser_flag_and_no_password():
    lines = create_owner("root", "--superuser")
    user = get_user_model().objects.get(username="root")
    assert user.is_superuser and user.is_staff and not user.has_usable_password()
    assert tokens.key_matches(user, lines[-1])


@pytest.mark.parametrize(
    "args,message",
    [
        (["taken"], "already exists"),
        (["has space"], "Invalid username"),
        (["x" * 151], "Invalid username"),
        (["   "], "Invalid username"),
        (["dave", "--password", "short"], "Invalid password"),
        # Django's four validators: numeric, common, like the user name.
        (["dave", "--password", "12345678"], "entirely numeric"),
        (["dave", "--password", "password123"], "too common"),
        (["margaretha", "--password", "margaretha1"], "too similar to the username"),
    ],
)
def test_bad_input_is_a_clear_error_that_creates_nothing(django_user_model, args, message):
    django_user_model.objects.create_user("taken")
    before = django_user_model.objects.count(), ApiToken.objects.count()
    with pytest.raises(CommandError, match=message):
        create_owner(*args)
    assert (django_user_model.objects.count(), ApiToken.objects.count()) == before

"""Django's password validators guard every form that sets a password: here
the admin's own "change password" page (the similarity rule, which needs a
longer user name, is checked through ``create_owner``)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.admin_support import PASSWORD


@pytest.mark.parametrize(
    "new,message",
    [
        ("1234567", "too short"),
        ("12345678", "entirely numeric"),
        ("password123", "too common"),
    ],
)
def test_a_weak_new_password_is_refused_and_the_old_one_kept(ann, ann_client, new, message):
    response = ann_client.post(
        reverse("admin:password_change"),
        {"old_password": PASSWORD, "new_password1": new, "new_password2": new},
    )
    assert response.status_code == 200
    assert message in response.content.decode()
    ann.refresh_from_db()
    assert ann.check_password(PASSWORD)


def test_a_strong_new_password_is_accepted(ann, ann_client):
    new = "correct horse battery staple"
    response = ann_client.post(
        reverse("admin:password_change"),
        {"old_password": PASSWORD, "new_password1": new, "new_password2": new},
    )
    assert response.status_code == 302
    ann.refresh_from_db()
    assert ann.check_password(new)

"""Shared fixtures. Tests run twice in ``make test``: on SQLite, then on
PostgreSQL (``DATABASE_URL=postgres://...``). Tests marked ``postgres`` need
real row locks or real processes sharing a server, and run only in the second
pass; under ``CI=true`` that pass is mandatory (see the Makefile)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PUNCTUAL_ALLOW_PRIVATE_TARGETS", "false")


def pytest_collection_modifyitems(config, items):
    from django.db import connection

    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: runs in the PostgreSQL pass of make test")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("alice", password="pw-alice-123", is_staff=True)


@pytest.fixture
def other_owner(django_user_model):
    return django_user_model.objects.create_user("bob", password="pw-bob-123", is_staff=True)

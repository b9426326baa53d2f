"""Fixtures for the admin tests: two owners in the "Job owners" group, a superuser."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.admin_support import make_owner


@pytest.fixture
def ann(db):
    return make_owner("ann")


@pytest.fixture
def ben(db):
    return make_owner("ben")


@pytest.fixture
def root(db):
    return make_owner("root", superuser=True)


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ann_client(ann):
    return _client_for(ann)


@pytest.fixture
def ben_client(ben):
    return _client_for(ben)


@pytest.fixture
def root_client(root):
    return _client_for(root)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # Each test makes owners with passwords: the production hasher is slow on purpose.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

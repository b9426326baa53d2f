"""``manage.py`` as an operator meets it: a bad setting is one line on stderr
and exit 1, not a traceback; DEBUG=true without SECRET_KEY starts quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # A bare environment: none of the test session's settings leak in.
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SECRET_KEY is required when DEBUG is false (set DEBUG=true for development)"),
        (
            {"SECRET_KEY": "x", "PUNCTUAL_POLL_SECONDS": "0"},
            "PUNCTUAL_POLL_SECONDS must be between 0.01 and 3600",
        ),
    ],
)
def test_a_bad_setting_is_one_line_on_stderr_and_exit_1(env, message):
    done = manage("check", **env)
    assert done.returncode == 1
    assert done.stderr == f"manage.py: {message}\n"
    assert done.stdout == ""


def test_debug_without_secret_key_says_nothing_about_it():
    # `help` loads the settings and touches no database.
    done = manage("help", DEBUG="true")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "SECRET_KEY" not in done.stdout

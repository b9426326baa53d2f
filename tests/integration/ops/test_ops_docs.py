"""The README and the docs site stay true: the receiver example of
docs/guides/receiver.md works against real Punctual deliveries, the run id
recipe of docs/concepts/run-id.md recomputes the ids Punctual sends, the
configuration table of docs/operating/configuration.md names every setting the
code reads, and the README opens with the two commands and links only to files
that exist."""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from dispatch import webhooks
from jobs import crypto
from tests.database import subprocess_database_url

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def receiver_example() -> str:
    page = (DOCS / "guides" / "receiver.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    [code] = [b for b in blocks if b.startswith('"""receiver.py')]
    return code


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def signed(secret: str, run_id: str, attempt: int) -> tuple[dict[str, str], bytes]:
    now = dt.datetime.now(dt.UTC)
    return webhooks.build_request(
        webhooks.Delivery(
            run_id=run_id,
            job_id=str(uuid.uuid4()),
            job_name="nightly report",
            scheduled_at=now,
            kind="scheduled",
            attempt=attempt,
            payload={"report": "sales"},
            url="http://127.0.0.1/",
            secrets=[secret],
            timeout_seconds=5,
        ),
        now,
    )


def test_the_documented_receiver_verifies_and_applies_each_fire_once(tmp_path, transactional_db):
    (tmp_path / "receiver.py").write_text(receiver_example())
    secret, port = crypto.generate_secret(), free_port()
    env = dict(os.environ, PUNCTUAL_SECRET=secret, PORT=str(port), PYTHONUNBUFFERED="1")
    env["RECEIVER_DATABASE_URL"] = subprocess_database_url()  # the receiver's table goes there
    log = (tmp_path / "receiver.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "receiver.py"], cwd=tmp_path, env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail((tmp_path / "receiver.log").read_text())
                time.sleep(0.05)

        run_id = str(uuid.uuid4())
        for attempt in (1, 2):  # a retry of the same run: same webhook-id
            headers, body = signed(secret, run_id, attempt)
            assert requests.post(url, data=body, headers=headers, timeout=5).status_code == 200
        headers, body = signed(crypto.generate_secret(), str(uuid.uuid4()), 1)
        assert requests.post(url, data=body, headers=headers, timeout=5).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    output = (tmp_path / "receiver.log").read_text()
    assert output.count("firing for nightly report") == 1, output


def test_the_configuration_table_names_every_setting_the_code_reads():
    settings_py = (ROOT / "scheduler_site" / "settings.py").read_text()
    read = set(re.findall(r"""env(?:\.\w+)?\(\s*["'](\w+)["']""", settings_py))
    read |= set(re.findall(r"""os\.environ\.get\(\s*["'](\w+)["']""", settings_py))
    read |= set(re.findall(r"^\s+(\w+)=\(", settings_py, re.M))  # environ.Env(NAME=(type, default))
    read |= set(re.findall(r"""_limit\(\s*["'](\w+)["']""", settings_py))  # the limits
    assert {"DATABASE_URL", "SECRET_KEY", "PUNCTUAL_ENCRYPTION_KEYS"} <= read
    table = (DOCS / "operating" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert read - documented == set(), "settings missing from docs/operating/configuration.md"
    assert documented - read == set(), (
        "docs/operating/configuration.md documents settings the code does not read"
    )


def test_the_readme_opens_with_the_two_commands_and_the_docs_keep_the_shared_sections():
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)[1]
    assert [line.split()[0:2] for line in first_block.splitlines()] == [
        ["make", "run"],
        ["make", "test"],
    ]
    for page, title in (
        ("benchmarks.md", "# Benchmarks"),
        ("design/fault-matrix.md", "# Fault matrix"),
        ("design/choices.md", "# Design choices"),
        ("security.md", "# Security"),
    ):
        assert (DOCS / page).read_text().startswith(f"{title}\n"), page
    assert "```mermaid\nflowchart" in (DOCS / "design" / "architecture.md").read_text()
    assert "```mermaid\nstateDiagram-v2" in (DOCS / "concepts" / "runs-and-retries.md").read_text()


def test_the_readme_links_only_to_files_that_exist():
    """mkdocs build --strict checks the site's links; the README is not part
    of the site, so its relative links into docs/ are checked here."""
    links = re.findall(r"\]\(([^)#]+?)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local, "the README links into docs/"
    missing = [link for link in local if not (ROOT / link).is_file()]
    assert missing == []


@pytest.mark.django_db
def test_the_documented_run_id_recipe_recomputes_the_ids_punctual_sends(owner):
    """A receiver following docs/concepts/run-id.md from a delivery's body gets
    the id Punctual sent, for a fire with and without a fraction of a second,
    and for a manual trigger with a key."""
    from dispatch.dispatcher import Dispatcher
    from runs import job_verbs
    from runs.models import Run
    from tests.factories import make_job, rewrite_job

    page = (DOCS / "concepts" / "run-id.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    [code] = [b for b in blocks if "def fire_id(" in b]
    recipe: dict = {}
    exec(code, recipe)

    fires = [dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC)]
    fires.append(fires[0] + dt.timedelta(microseconds=250_001))
    for fire in fires:
        job = make_job(owner)
        rewrite_job(job, next_fire_at=fire, created_at=fire, start_at=fire)
        Dispatcher().tick(now=fire + dt.timedelta(seconds=1))
        run = Run.objects.get(job=job)
        # What the body of its delivery says.
        body_time = webhooks._iso_utc(run.scheduled_at)
        assert recipe["fire_id"](str(job.pk), body_time) == run.id

    manual = job_verbs.trigger(job, idempotency_key="deploy-42")
    assert recipe["manual_id"](str(job.pk), "deploy-42") == manual.id

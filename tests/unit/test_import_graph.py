"""The layering runs one way: core -> accounts -> jobs -> alerts -> runs ->
{dispatch, api, console} -> ops -> scheduler_site (tools/import_graph.py), where
the three in braces share a rank and may not import each other. An import
against it, or a cycle, fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "import_graph.py"

RANKS = [
    ["core"],
    ["accounts"],
    ["jobs"],
    ["alerts"],
    ["runs"],
    ["dispatch", "api", "console"],
    ["ops"],
    ["scheduler_site"],
]
PACKAGES = [name for rank in RANKS for name in rank]


def run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=60
    )


def write(root: Path, files: dict[str, str]) -> None:
    for name in PACKAGES:
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").touch()
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_every_package_imports_only_the_layers_below_it():
    result = run(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    imports = dict(line.split(None, 1) for line in result.stdout.splitlines()[1:])
    assert list(imports) == PACKAGES
    for package, targets in imports.items():
        rank = next(i for i, names in enumerate(RANKS) if package in names)
        below = {name for names in RANKS[:rank] for name in names}
        assert set(targets.replace(",", " ").split()) - {"-"} <= below, package
    assert imports["core"] == "-"


def test_a_function_local_import_upwards_is_a_violation_and_a_cycle(tmp_path):
    write(
        tmp_path,
        {
            "jobs/models.py": "def pause():\n    from runs.models import Run\n",
            "runs/models.py": "from jobs.models import pause\n",
        },
    )
    result = run(tmp_path)
    assert result.returncode == 1
    assert "jobs/models.py:2: jobs imports runs" in result.stdout
    assert "cycle: jobs -> runs -> jobs" in result.stdout


def test_an_import_within_one_rank_is_a_violation(tmp_path):
    write(
        tmp_path,
        {
            "api/views.py": "from console.display import run_url\n",
            "console/admin.py": "import runs.models\n",
        },
    )
    result = run(tmp_path)
    assert result.returncode == 1
    assert "api/views.py:1: api imports console (the same rank)" in result.stdout
    assert "console/admin.py" not in result.stdout  # runs is below console: allowed


def test_the_faces_and_the_engine_do_not_import_each_other(tmp_path):
    write(
        tmp_path,
        {
            "dispatch/worker.py": "from api.run_views import RunViewSet\n",
            "api/run_views.py": "from dispatch import worker\n",
            "console/run_admin.py": "from dispatch import fleet\n",
        },
    )
    result = run(tmp_path)
    assert result.returncode == 1
    assert "dispatch/worker.py:1: dispatch imports api (the same rank)" in result.stdout
    assert "api/run_views.py:1: api imports dispatch (the same rank)" in result.stdout
    assert "console/run_admin.py:1: console imports dispatch (the same rank)" in result.stdout
    assert "cycle: dispatch -> api -> dispatch" in result.stdout


def test_a_face_may_import_the_layers_below_and_ops_may_import_a_face(tmp_path):
    write(
        tmp_path,
        {
            "api/job_views.py": "from runs import job_verbs\nfrom accounts import tokens\n",
            "console/job_admin.py": "from jobs.models import Job\n",
            "ops/dashboard.py": "from console import attention\nfrom dispatch import fleet\n",
        },
    )
    result = run(tmp_path)
    assert result.returncode == 0, result.stdout
    rows = {line.split()[0]: line.split(None, 1)[1] for line in result.stdout.splitlines()[1:]}
    assert rows["api"] == "accounts, runs"
    assert rows["console"] == "jobs"
    assert rows["ops"] == "dispatch, console"


def test_migrations_and_tests_are_left_out(tmp_path):
    write(
        tmp_path,
        {
            "core/migrations/0001_initial.py": "import jobs.models\n",
            "jobs/tests/test_x.py": "import ops\n",
            "runs/x.py": "import importlib\nimportlib.import_module('jobs.models')\n",
        },
    )
    result = run(tmp_path)
    assert result.returncode == 0, result.stdout
    assert any(line.split() == ["runs", "jobs"] for line in result.stdout.splitlines())

"""The layering runs one way: core -> accounts -> jobs -> runs -> dispatch -> ops -> scheduler_site
(tools/import_graph.py). An import against it, or a cycle, fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "import_graph.py"


def run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=60
    )


def write(root: Path, files: dict[str, str]) -> None:
    for name in ("core", "accounts", "jobs", "runs", "dispatch", "ops", "scheduler_site"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").touch()
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_every_package_imports_only_the_layers_below_it():
    result = run(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    imports = dict(line.split(None, 1) for line in result.stdout.splitlines()[1:])
    allowed = ["core", "accounts", "jobs", "runs", "dispatch", "ops", "scheduler_site"]
    assert list(imports) == allowed
    for package, targets in imports.items():
        below = allowed[: allowed.index(package)]
        assert set(targets.replace(",", " ").split()) - {"-"} <= set(below), package
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

"""Signals of the operations commands."""

from __future__ import annotations

from django.dispatch import Signal

# Sent by ``manage.py prune_runs`` once runs and fleet rows are pruned, with
# ``now`` and ``cutoff`` (runs scheduled before it are gone). An app that keeps
# history of its own (the demo receiver) prunes it too, without prune_runs
# knowing the app exists.
runs_pruned = Signal()

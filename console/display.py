"""How runs read in the admin: state badges, lags, and strips of outcomes.

Everything is rendered on the server as plain HTML with CSS classes
(``st-<state>``, styled in ``templates/admin/base_site.html``), so the pages
work offline and cost no JavaScript.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from jobs.display import short_duration
from runs.models import Run, RunState

_PLACEHOLDER = "00000000-0000-0000-0000-000000000000"

STATE_LABELS = dict(RunState.choices)


@functools.cache
def _run_url_template() -> str:
    # One reverse() per process instead of one per square: a page of 100 jobs
    # with 20 squares each would otherwise spend its time in the URL resolver.
    return reverse("admin:runs_run_change", args=[_PLACEHOLDER])


def run_url(run_id) -> str:
    return _run_url_template().replace(_PLACEHOLDER, str(run_id))


def state_badge(state: str, text: str | None = None) -> SafeString:
    return format_html(
        '<span class="punctual-badge st-{}">{}</span>',
        state,
        text or STATE_LABELS.get(state, state),
    )


def lag_text(lag_seconds: float | None) -> str:
    """``+1.2 s`` for a run that started late; empty when it has not started."""
    if lag_seconds is None:
        return ""
    return "+" + short_duration(max(lag_seconds, 0.0))


def run_summary(run: Run) -> str:
    """One line about a run, for tooltips: time, state, status, lag, reason."""
    parts = [
        f"{run.scheduled_at:%Y-%m-%d %H:%M:%S} UTC",
        STATE_LABELS.get(run.state, run.state).lower(),
    ]
    if run.last_status_code:
        parts.append(f"HTTP {run.last_status_code}")
    if run.lag_seconds is not None:
        parts.append(f"lag {lag_text(run.lag_seconds)}")
    if run.reason:
        parts.append(run.reason)
    return " · ".join(parts)


def outcome_strip(runs: Iterable[Run], *, empty: str = "no runs yet") -> SafeString:
    """Small coloured squares, oldest on the left, each linking to its run.

    ``runs`` must carry the fields that ``run_summary`` reads; the admin
    fetches them for a whole page of jobs in one query (console/recent.py).
    """
    ordered = sorted(runs, key=lambda r: r.scheduled_at)
    if not ordered:
        return format_html('<span class="punctual-quiet">{}</span>', empty)
    squares = format_html_join(
        "",
        '<a class="punctual-sq st-{}" href="{}" title="{}"></a>',
        ((r.state, run_url(r.pk), run_summary(r)) for r in ordered),
    )
    return format_html('<span class="punctual-strip">{}</span>', squares)

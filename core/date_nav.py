"""The date links above a big table's admin list, drawn without a query.

Django's ``date_hierarchy`` asks the table which years, months or days hold
rows: a ``MIN``/``MAX`` over the whole table, then a ``SELECT DISTINCT`` of
truncated dates over a month of rows. On a table of millions that is a scan.
Here the links come from the calendar instead: the last days, the months of
a year up to today, the days of a month up to today. A link to a day without
rows shows an empty list, which costs one index probe. The filter itself is
Django's (a ``>=``/``<`` range on the field, which PostgreSQL prunes to the
partitions it covers).
"""

from __future__ import annotations

import calendar
import datetime as dt
from collections.abc import Callable
from typing import Any

RECENT_DAYS = 7


def date_nav(
    field: str,
    params: dict[str, str],
    today: dt.date,
    link: Callable[[dict[str, Any]], str],
) -> dict[str, Any]:
    """The context of Django's ``admin/date_hierarchy.html``: ``show``,
    ``back`` (a link up a level) and ``choices`` (links down a level).

    ``params`` are the list's query parameters, ``link`` makes a list URL
    from the date parameters to set (ChangeList.get_query_string).
    """
    year, month, day = (params.get(f"{field}__{part}") for part in ("year", "month", "day"))

    def to(y: int, m: int | None = None, d: int | None = None) -> str:
        values = {f"{field}__year": y, f"{field}__month": m, f"{field}__day": d}
        return link({k: v for k, v in values.items() if v is not None})

    def day_choice(d: dt.date, title: str = "{}") -> dict[str, str]:
        return {"title": title.format(_day_title(d, today)), "link": to(d.year, d.month, d.day)}

    if year is None:
        days = [today - dt.timedelta(days=n) for n in range(RECENT_DAYS)]
        choices = [day_choice(d) for d in days]
        this_month = today.replace(day=1)
        last_month = (this_month - dt.timedelta(days=1)).replace(day=1)
        choices += [
            {"title": f"{m:%B %Y}", "link": to(m.year, m.month)} for m in (this_month, last_month)
        ]
        return {"show": True, "back": None, "choices": choices}
    y = int(year)
    if month is None:
        last = today.month if y == today.year else 12
        choices = [
            {"title": f"{dt.date(y, m, 1):%B}", "link": to(y, m)} for m in range(last, 0, -1)
        ]
        return {"show": True, "back": {"link": link({}), "title": "All dates"}, "choices": choices}
    m = int(month)
    if day is None:
        last = calendar.monthrange(y, m)[1]
        if (y, m) == (today.year, today.month):
            last = today.day
        choices = [day_choice(dt.date(y, m, d)) for d in range(last, 0, -1)]
        return {"show": True, "back": {"link": to(y), "title": str(y)}, "choices": choices}
    chosen = dt.date(y, m, int(day))
    before, after = chosen - dt.timedelta(days=1), chosen + dt.timedelta(days=1)
    choices = [day_choice(before, "‹ {}"), {"title": _day_title(chosen, today)}]
    if after <= today:
        choices.append(day_choice(after, "{} ›"))
    back = {"link": to(y, m), "title": f"{chosen:%B %Y}"}
    return {"show": True, "back": back, "choices": choices}


def _day_title(day: dt.date, today: dt.date) -> str:
    if day == today:
        return "Today"
    if day == today - dt.timedelta(days=1):
        return "Yesterday"
    return f"{day:%a %d %b}"

"""A paginator for tables too big to count (runs, audit events).

Django's admin asks its paginator for ``count`` on every list page, and the
stock paginator answers with ``SELECT COUNT(*)`` over everything the filters
match: a full scan of a million runs on each page view. Like healthchecks'
``PingsPaginator``, this one never counts the whole result. It looks a few
pages past the page being shown instead:

1. Read the primary keys of the rows from this page's first row up to
   ``pages_ahead`` pages further, plus one: ``SELECT id ... ORDER BY ...
   LIMIT n OFFSET m``, which walks the list's index and stops.
2. If fewer came back, the end of the list is in sight, and ``count`` is exact.
3. Otherwise ``count`` is a lower bound (``count_is_exact`` is False): the
   page links reach ``pages_ahead`` pages ahead, and the page says "more than".

The cost grows with the page number, never with the table. A page whose rows
would start past PostgreSQL's largest ``OFFSET`` (a bigint) cannot hold any:
its window is empty without a query, so the page is past the end.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

# PostgreSQL's OFFSET and LIMIT are bigints.
MAX_OFFSET = 2**63 - 1


class LookaheadPaginator(Paginator):
    pages_ahead = 5
    # The admin hands its paginator a queryset: ``count`` reads primary keys from it.
    object_list: QuerySet[Any]

    def __init__(self, object_list: QuerySet[Any], per_page, *, page_number=1, **kwargs) -> None:
        super().__init__(object_list, per_page, **kwargs)
        try:
            self.page_number = max(1, int(page_number))
        except (TypeError, ValueError):
            self.page_number = 1
        self.count_is_exact = True

    @cached_property
    def count(self) -> int:
        offset = (self.page_number - 1) * self.per_page
        window = self.per_page * self.pages_ahead
        if offset + window + 1 > MAX_OFFSET:
            return offset  # no table has rows there: the page is past the end
        seen = len(self.object_list.values_list("pk", flat=True)[offset : offset + window + 1])
        if seen > window:
            self.count_is_exact = False
        return offset + seen

"""Paginators for tables too big to count: the admin's (runs, audit events),
and the API lists' cursor (``ApiCursor``, at the end).

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
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination

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


class ApiCursor(CursorPagination):
    """The API lists' cursor pagination (docs/guides/api.md "Lists"); subclasses set
    ``ordering``.

    A cursor, not a page number: no COUNT(*) over a big table, and rows
    arriving at the top do not shift the pages being read. DRF quietly
    answers the default page size for a ``page_size`` it cannot use (0,
    -1, "ten") and caps one over the maximum; here each is a 400 naming the
    parameter, and the schema gives the bounds.
    """

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    cursor_query_description = "The cursor of a `next` or `previous` link; none for the first page."
    page_size_query_description = "Results per page: 1 to 500 (default 50)."

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        # isascii: str.isdigit accepts other scripts' digits; len: int() of a
        # huge string is slow, and the bound has three digits anyway.
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or not (
            1 <= int(raw) <= self.max_page_size
        ):
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        f"Must be a whole number from 1 to {self.max_page_size}."
                    ]
                }
            )
        return int(raw)

    def get_schema_operation_parameters(self, view) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_page_size,
                    "default": self.page_size,
                }
        return parameters

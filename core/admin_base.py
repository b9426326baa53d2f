"""What every Punctual model admin shares (the site itself is scheduler_site/admin_site.py).

The admin is the job owner's main screen (docs/guides/owners.md "The admin"). Owners
are staff users in the "Job owners" group (jobs/migrations/0002_job_owners_group):
they see and change only their own jobs, runs and events, and another owner's
object is *not found*, answered with a 404 like the API, whatever the URL.

Every list refuses a bad query with a 4xx page that names the problem, never
a 500 (docs/guides/api.md "Input rules"): :class:`RefusingListAdmin`, which the site adds to
every model admin it registers, Django's and DRF's included. So does the
"view on site" shortcut (:func:`view_on_site`), whatever the id.
"""

from __future__ import annotations

import logging

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import PAGE_VAR
from django.contrib.contenttypes.models import ContentType
from django.contrib.contenttypes.views import shortcut
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import InvalidPage
from django.db import DataError, router, transaction
from django.http import Http404
from django.template.response import SimpleTemplateResponse, TemplateResponse

from core import strict_json
from core.paginators import LookaheadPaginator

logger = logging.getLogger(__name__)


class BadListQuery(Exception):
    """A list's query string that cannot be answered; ``status`` is 400 or 404."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def query_problem(params) -> str | None:
    """The first parameter (name or value) PostgreSQL could not even compare
    with, e.g. a NUL character, or None. ``params`` is a QueryDict."""
    for name, values in params.lists():
        for text in (name, *values):
            reason = strict_json.string_problem(text)
            if reason:
                return f"The parameter “{name}”: {reason}"
    return None


class RefusingListAdmin(admin.ModelAdmin):
    """A list whose query cannot be answered is a 4xx page saying why.

    Django's admin answers a filter it cannot apply with a redirect to
    ``?e=1`` and a "Database error" page, and lets through what only the
    database refuses (a NUL character, an invalid ``__regex``, a page number
    past bigint) or what fails while the query is compiled (a year out of
    range): those were 500s. Here, in order:

    - a NUL character (or a lone surrogate) in any parameter is a 400 before
      any query runs;
    - a lookup Django refuses is a 400 naming Django's reason; a page past the
      end of the list is a 404;
    - the list (or the action posted to it) runs, and is rendered, inside a
      savepoint: a ``DataError`` (the database refused a value), a
      ``ValidationError`` (an action's selection that is not an id) or a
      ``ValueError``/``OverflowError`` (a value out of Python's range) is
      rolled back and answered 400 with the reason. A request with no
      parameters at all cannot have a bad one, so there those errors are bugs
      and are raised.
    """

    refused_template = "admin/punctual/refused.html"

    def changelist_view(self, request, extra_context=None):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied  # as Django would: whatever the query, first
        problem = query_problem(request.GET) or query_problem(request.POST)
        if problem:
            return self._refuse(request, BadListQuery(problem))
        if not request.GET and not request.POST:
            # No query, nothing bad in it: the plain list runs as it is, with
            # no savepoint to pay for, and any error in it is a bug.
            return super().changelist_view(request, extra_context)
        try:
            with transaction.atomic(using=router.db_for_read(self.model)):
                response = super().changelist_view(request, extra_context)
                if isinstance(response, SimpleTemplateResponse):
                    response.render()  # the rows are read here: inside the savepoint
        except BadListQuery as exc:
            return self._refuse(request, exc)
        except (DataError, ValidationError, ValueError, OverflowError) as exc:
            logger.warning("admin list refused %s", request.get_full_path(), exc_info=True)
            refusal = BadListQuery(f"This query cannot be applied: {_reason(exc)}")
            return self._refuse(request, refusal)
        return response

    def get_changelist_instance(self, request):
        try:
            return super().get_changelist_instance(request)
        except IncorrectLookupParameters as exc:
            # ChangeList raises it bare, from the paginator's InvalidPage.
            if isinstance(exc.__context__, InvalidPage):
                page = request.GET.get(PAGE_VAR)
                raise BadListQuery(f"There is no page {page} in this list.", 404) from exc
            raise BadListQuery(f"This query cannot be applied: {_reason(exc)}") from exc

    def _refuse(self, request, problem: BadListQuery) -> TemplateResponse:
        plural = str(self.opts.verbose_name_plural)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{plural.capitalize()}: this list cannot be shown",
            "problem": str(problem),
        }
        return TemplateResponse(request, self.refused_template, context, status=problem.status)


def _reason(exc: Exception) -> str:
    """The first line of what the database, Django or Python said."""
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return (str(exc) or type(exc).__name__).splitlines()[0]


def refusing(admin_class: type[admin.ModelAdmin]) -> type[admin.ModelAdmin]:
    """``admin_class`` with :class:`RefusingListAdmin`'s rules, for the site's
    ``register``: a model admin from another app (users, groups, tokens) gets
    them too."""
    if issubclass(admin_class, RefusingListAdmin):
        return admin_class
    return type(
        admin_class.__name__,
        (RefusingListAdmin, admin_class),
        {"__module__": admin_class.__module__, "__doc__": admin_class.__doc__},
    )


class OwnerScopedAdmin(admin.ModelAdmin):
    """Base for admins of owned rows.

    Subclasses narrow ``get_queryset`` to the user's own rows. Every object
    URL (change, delete, history and the custom buttons) loads its object
    through ``get_object``, so this one rule makes another owner's object a
    404, never a page that would confirm that it exists.
    """

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404(f"No {self.opts.verbose_name} matches the given query.")
        return obj


class BigTableAdmin(admin.ModelAdmin):
    """Lists over tables that grow without bound (runs, audit events).

    No query may be a full ``COUNT(*)``: the paginator looks a few pages ahead
    instead of counting (core/paginators.py), the unfiltered total is not
    shown, and the sidebar's facet counts are off.
    """

    paginator = LookaheadPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        return self.paginator(
            queryset,
            per_page,
            page_number=request.GET.get(PAGE_VAR, 1),
            orphans=orphans,
            allow_empty_first_page=allow_empty_first_page,
        )


def view_on_site(request, content_type_id: str, object_id: str):
    """The admin's "view on site" shortcut, ``/admin/r/<content type>/<id>/``:
    Django's, for a model that has a page outside the admin.

    Django's own view looks the object up for any installed model before it
    asks whether the model has a page at all, and lets through the
    ``ValidationError`` of a malformed UUID: a 500 for every job and run.
    Here a content type that is none, and a model without
    ``get_absolute_url``, are not found (404) before any lookup. That is
    every model of Punctual: the admin is the product's screen, and there is
    no site beside it. A model that gains a page gets Django's view, and the
    admin crawl (tests/integration/admin/test_admin_crawl.py) then asks it
    for every malformed id.
    """
    try:
        model = ContentType.objects.get_for_id(int(content_type_id)).model_class()
    except (ValueError, ContentType.DoesNotExist):
        raise Http404("No such content type.") from None
    if model is None or not hasattr(model, "get_absolute_url"):
        raise Http404("This kind of object has no page outside the admin.")
    return shortcut(request, content_type_id, object_id)

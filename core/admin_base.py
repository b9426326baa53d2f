"""What every Punctual model admin shares (the site itself is scheduler_site/admin_site.py).

The admin is the job owner's main screen (README "The REST API" "The admin"). Owners
are staff users in the "Job owners" group (jobs/migrations/0002_job_owners_group):
they see and change only their own jobs, runs and events, and another owner's
object is *not found*, answered with a 404 like the API, whatever the URL.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.main import PAGE_VAR
from django.http import Http404

from core.paginators import LookaheadPaginator


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

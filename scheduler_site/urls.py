"""URL wiring only: the admin, the API under /api/v1/, health, /metrics, the demo.
The site's root sends a visitor to the admin, where an owner starts."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False), name="root"),
    path("admin/", admin.site.urls),
    path("", include("scheduler_site.ops_urls")),
    path("api/v1/", include("api.urls")),
]

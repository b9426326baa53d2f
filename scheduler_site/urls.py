"""URL wiring only: the admin, the API under /api/v1/, health, /metrics, the demo."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("scheduler_site.ops_urls")),
    path("api/v1/", include("api.urls")),
]

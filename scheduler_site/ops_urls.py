"""Operations endpoints: health, metrics, and the demo receiver when installed.

Included at "" before the API, so ``api/v1/health/`` is matched here, without
the API's authentication. With DEBUG on (``make run``), static files for the
admin are served too, since gunicorn does not serve them by itself.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import URLPattern, URLResolver, include, path

from ops.health import health_view
from ops.metrics import metrics_view

urlpatterns: list[URLPattern | URLResolver] = [
    path("api/v1/health/", health_view, name="health"),
    path("metrics", metrics_view, name="metrics"),
    # Empty unless DEBUG is on.
    *staticfiles_urlpatterns(),
]

if apps.is_installed("ops.demo"):  # PUNCTUAL_DEMO=true
    urlpatterns.append(path("", include("ops.demo.urls")))

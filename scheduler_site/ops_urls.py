"""Operations endpoints: health, metrics, the built-in demo receiver.

Included at "" before the API, so ``api/v1/health/`` is matched here, without
the API's authentication. With DEBUG on (``make run``), static files for the
admin are served too, since gunicorn does not serve them by itself.
"""

from __future__ import annotations

from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import path

from dispatch.demo import index_view, receiver_view
from dispatch.health import health_view
from dispatch.metrics import metrics_view

urlpatterns = [
    path("api/v1/health/", health_view, name="health"),
    path("metrics", metrics_view, name="metrics"),
    path("demo/", index_view, name="demo-index"),
    path("demo/receiver/<uuid:job_id>/", receiver_view, name="demo-receiver"),
    # Empty unless DEBUG is on.
    *staticfiles_urlpatterns(),
]

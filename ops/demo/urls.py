"""The demo receiver's pages (ops/demo/views.py), wired in only with PUNCTUAL_DEMO=true."""

from __future__ import annotations

from django.urls import path, re_path

from ops.demo.views import catch_all_view, index_view, receiver_view

urlpatterns = [
    path("demo/", index_view, name="demo-index"),
    path("demo/receiver/<uuid:job_id>/", receiver_view, name="demo-receiver"),
    # Any other path under /demo/receiver/: the job comes from the webhook-id.
    re_path(r"^demo/receiver/(?P<subpath>.*)$", catch_all_view, name="demo-receiver-any"),
]

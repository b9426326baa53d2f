"""The demo receiver's pages (ops/demo/views.py), wired in only with PUNCTUAL_DEMO=true."""

from __future__ import annotations

from django.urls import path

from ops.demo.views import index_view, receiver_view

urlpatterns = [
    path("demo/", index_view, name="demo-index"),
    path("demo/receiver/<uuid:job_id>/", receiver_view, name="demo-receiver"),
]

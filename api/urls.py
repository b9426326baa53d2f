"""The REST API under /api/v1/ (docs/guides/api.md; each endpoint in docs/reference/api.md).

Included by scheduler_site/urls.py. Health is not API: it lives in
scheduler_site/ops_urls.py, unauthenticated.
"""

from __future__ import annotations

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.decorators import api_view, permission_classes, renderer_classes
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from api.alert_channel_views import AlertChannelViewSet
from api.job_views import JobViewSet, SchedulePreviewView
from api.run_views import RunViewSet
from api.token_views import TokenRotateView, TokenView

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("runs", RunViewSet, basename="run")
router.register("alert-channels", AlertChannelViewSet, basename="alert-channel")


@api_view(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
@permission_classes([AllowAny])
@renderer_classes([JSONRenderer])
def not_found(request, *args, **kwargs):
    """Unknown paths under /api/v1/ answer JSON too (and no slash redirects,
    which would turn a POST into a GET, or a 500 under DEBUG)."""
    hint = "" if request.path.endswith("/") else " API paths end with a slash."
    return Response({"detail": "Not found." + hint}, status=404)


not_found.cls.schema = None  # not part of the documented API

urlpatterns = [
    *router.urls,
    path("token/", TokenView.as_view(), name="token"),
    path("token/rotate/", TokenRotateView.as_view(), name="token-rotate"),
    path("schedules/preview/", SchedulePreviewView.as_view(), name="schedule-preview"),
    # The schema and its browser are public: they describe the API, not anyone's data.
    path(
        "schema/",
        SpectacularAPIView.as_view(permission_classes=[AllowAny], authentication_classes=[]),
        name="api-schema",
    ),
    path(
        "docs/",
        SpectacularSwaggerView.as_view(
            url_name="api-schema", permission_classes=[AllowAny], authentication_classes=[]
        ),
        name="api-docs",
    ),
    re_path(r"^.*$", not_found, name="api-not-found"),
]

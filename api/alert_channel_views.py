"""``/api/v1/alert-channels/``: an owner's alert channels, and a test alert
(docs/guides/alerts.md "Channels"). Another owner's channel is the same 404
as one that never existed. The URL is answered once, on create or change."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response

from alerts import ledger, saving
from alerts.models import Channel
from api.alert_channel_serializers import (
    AlertChannelSerializer,
    NewAlertChannelSerializer,
    TestAlertSerializer,
)
from core.api_base import ApiViewMixin
from core.api_fields import EmptySerializer


class AlertChannelViewSet(ApiViewMixin, viewsets.GenericViewSet):
    serializer_class = AlertChannelSerializer
    pagination_class = None
    lookup_value_regex = "[^/]+"

    def get_queryset(self):
        assert self.request.user.is_authenticated  # IsAuthenticated, the API's default
        return Channel.objects.filter(owner=self.request.user)

    def get_channel(self, *, lock: bool = False) -> Channel:
        pk = str(self.kwargs["pk"])
        if not pk.isdigit() or int(pk) >= 2**63:
            # Not an id at all (or past bigint): the same 404, never a 500.
            raise NotFound()
        queryset = self.get_queryset()
        if lock:
            queryset = queryset.select_for_update()
        return get_object_or_404(queryset, pk=pk)

    def _context(self, **extra: Any) -> dict[str, Any]:
        return {"request": self.request, "owner": self.request.user, **extra}

    def _answers(self):
        data = self.request.data
        url = data.get("url") if isinstance(data, dict) else None
        # Before any transaction: no connection waits on DNS.
        assert self.request.user.is_authenticated
        return saving.look_up(url, owner_id=self.request.user.pk)

    @extend_schema(summary="Your alert channels")
    def list(self, request):
        data = AlertChannelSerializer(self.get_queryset(), many=True).data
        return Response(data)

    @extend_schema(summary="An alert channel")
    def retrieve(self, request, pk=None):
        return Response(AlertChannelSerializer(self.get_channel()).data)

    @extend_schema(
        summary="Add an alert channel (answers its URL, this once)",
        responses={201: NewAlertChannelSerializer},
    )
    def create(self, request):
        body = AlertChannelSerializer(
            data=request.data, context=self._context(resolve=self._answers())
        )
        body.is_valid(raise_exception=True)
        channel = saving.create(
            request.user, body.validated_data["name"], body.validated_data["url"]
        )
        return Response(
            {**AlertChannelSerializer(channel).data, "url": body.validated_data["url"]},
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(summary="Rename, or change the URL", responses={200: NewAlertChannelSerializer})
    def partial_update(self, request, pk=None):
        return self._update(request, partial=True)

    @extend_schema(summary="Replace the name and URL", responses={200: NewAlertChannelSerializer})
    def update(self, request, pk=None):
        return self._update(request, partial=False)

    def _update(self, request, *, partial: bool) -> Response:
        answers = self._answers()
        with transaction.atomic():
            channel = self.get_channel(lock=True)
            body = AlertChannelSerializer(
                channel, data=request.data, partial=partial, context=self._context(resolve=answers)
            )
            body.is_valid(raise_exception=True)
            if "name" in body.validated_data:
                channel.name = body.validated_data["name"]
            url = body.validated_data.get("url")
            if url is not None:
                saving.change_url(channel, url)
            channel.save()
        data = AlertChannelSerializer(channel).data
        return Response({**data, "url": url} if url is not None else data)

    @extend_schema(summary="Delete an alert channel (and its alerts)")
    def destroy(self, request, pk=None):
        self.get_channel().delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Send a test alert (queued: a worker sends it)",
        description="Answers 202 at once with the queued alert's id; a worker sends it within"
        " seconds, and the job page and the admin's alert list show how it went.",
        request=EmptySerializer,
        responses={202: TestAlertSerializer},
    )
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        EmptySerializer(data=request.data or {}).is_valid(raise_exception=True)
        alert_id = ledger.queue_test(self.get_channel())
        return Response({"alert_id": alert_id}, status=status.HTTP_202_ACCEPTED)

"""Alert channels and the alert ledger in the admin (docs/guides/alerts.md).

- Channels: an owner's own (a superuser sees every owner's). The apprise URL
  is typed in, checked by the rules the API uses (alerts/saving.py, its
  hosts looked up before the admin's transaction), stored encrypted, shown
  once on the page after it was saved, and masked afterwards. "Send test
  alert" queues a test alert for a worker.
- Alerts: read-only, the owner's channels' own, newest first.
"""

from __future__ import annotations

from typing import cast

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.urls import reverse

from alerts import ledger, saving
from alerts.models import MAX_CHANNEL_URL, Alert, Channel
from console import new_secrets
from core.admin_base import BigTableAdmin, OwnerScopedAdmin
from jobs import lookups

NEW_URLS_SESSION_KEY = "punctual.new_alert_urls"
# Where changeform_view leaves the posted URL's answers for the form.
URL_ANSWERS = "punctual_channel_answers"


class ChannelForm(forms.ModelForm):
    url = forms.CharField(
        label="Apprise URL",
        max_length=MAX_CHANNEL_URL,
        required=False,
        strip=True,
        widget=forms.TextInput(
            attrs={"class": "vLargeTextField", "placeholder": "json://alerts.example.com/hook"}
        ),
        help_text="Any apprise URL: mailto://, json://, slack://, discord://, tgram://, ntfy://,"
        " … Stored encrypted and shown once, after saving. On a change, leave it empty to"
        " keep the current one.",
    )

    class Meta:
        model = Channel
        fields = ["name"]

    # Set per request by ChannelAdmin.get_form.
    answers: lookups.Answers | None = None
    owner = None

    def clean_name(self):
        name = self.cleaned_data["name"]
        clash = Channel.objects.filter(owner=self.owner, name=name)
        if self.instance.pk:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise forms.ValidationError("You already have a channel with this name.")
        return name

    def clean_url(self):
        url = self.cleaned_data["url"]
        if not url:
            if self.instance.pk is None:
                raise forms.ValidationError("An apprise URL is required.")
            return url
        assert self.answers is not None  # looked up before the transaction
        reason = saving.refusal(url, self.answers)
        if reason:
            raise forms.ValidationError(reason)
        return url


@admin.action(description="Send a test alert")
def send_test_alert(modeladmin, request, queryset):
    ids = [ledger.queue_test(channel) for channel in queryset]
    modeladmin.message_user(
        request,
        f"Queued {len(ids)} test alert(s): a worker sends them within seconds;"
        " the Alerts list shows how they went.",
        messages.SUCCESS,
    )


@admin.register(Channel)
class ChannelAdmin(OwnerScopedAdmin):
    form = ChannelForm
    list_display = ("name", "masked", "created_at")
    search_fields = ("name",)
    actions = [send_test_alert]
    readonly_fields = ("masked", "created_at")
    change_form_template = "admin/alerts/channel/change_form.html"

    def get_queryset(self, request):
        return Channel.objects.for_owner(request.user).select_related("owner")

    def get_list_display(self, request):
        if request.user.is_superuser:
            return (*self.list_display, "owner")
        return self.list_display

    def get_fields(self, request, obj=None):
        return ["name", "url"] if obj is None else ["name", "masked", "url", "created_at"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        # A subclass of self.form; the stubs only know ModelForm.
        form = cast("type[ChannelForm]", super().get_form(request, obj, change, **kwargs))
        form.answers = getattr(request, URL_ANSWERS, None)
        form.owner = obj.owner if obj is not None else request.user
        return form

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST":
            # Before Django's transaction: no connection waits on DNS.
            url = request.POST.get("url", "").strip()
            setattr(request, URL_ANSWERS, saving.look_up(url, owner_id=request.user.pk))
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request, obj, form, change):
        if not change:
            obj.owner = request.user
        url = form.cleaned_data.get("url")
        if url:
            saving.change_url(obj, url)
        super().save_model(request, obj, form, change)
        if url:
            _stash_url(request, obj, url)

    def response_add(self, request, obj, post_url_continue=None):
        # The channel's page, which shows the URL this once.
        self.message_user(request, f"The channel “{obj.name}” was added.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:alerts_channel_change", args=[obj.pk]))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        if request.method == "GET":
            obj = self.get_object(request, object_id)
            url = _pop_url(request, obj)
            if url is not None:
                extra_context["new_url"] = url
        return super().change_view(request, object_id, form_url, extra_context)


def _stash_url(request, channel: Channel, url: str) -> None:
    new_secrets.stash(request, NEW_URLS_SESSION_KEY, channel.pk, url)


def _pop_url(request, channel: Channel) -> str | None:
    return new_secrets.pop(request, NEW_URLS_SESSION_KEY, channel.pk)


@admin.register(Alert)
class AlertAdmin(BigTableAdmin):
    list_display = (
        "due_at",
        "kind",
        "state",
        "job",
        "channel",
        "count",
        "attempts",
        "sent_at",
        "last_error",
    )
    list_filter = ("state", "kind")
    list_select_related = ("job", "channel")
    ordering = ("-due_at", "-id")

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        if request.user.is_superuser:
            return qs
        return qs.filter(channel__owner=request.user)

    def has_add_permission(self, request):
        return False  # alerts come from events, and test alerts from a channel

    def has_change_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff

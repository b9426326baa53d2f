"""The admin's "My API token" page (``/admin/token/``): any signed-in owner
sees their token's prefix, creation, expiry and last use, and rotates it
(the new key shown once, on the answer to the rotation) or revokes it, each
after a confirmation step. docs/guides/owners.md "Owners and access".
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from accounts import tokens
from accounts.tokens import MAX_EXPIRY_DAYS
from core.db import db_now

ACTIONS = ("rotate", "revoke")


class RotateForm(forms.Form):
    expires_in_days = forms.IntegerField(
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        required=False,
        label="Expires in (days)",
        help_text="Leave empty for a token that never expires.",
    )


def my_token_view(request, context: dict):
    """GET shows the token (``?confirm=rotate|revoke`` asks first); POST acts."""
    context = {**context, "title": "My API token"}
    if request.method == "POST":
        return _act(request, context)
    confirm = request.GET.get("confirm")
    return _page(request, context, confirm=confirm if confirm in ACTIONS else None)


def _act(request, context: dict):
    action = request.POST.get("action")
    if action == "revoke":
        if tokens.revoke(request.user):
            messages.success(request, "Your API token is revoked: its key no longer works.")
        else:
            messages.info(request, "You had no live API token.")
        return HttpResponseRedirect(reverse("admin:my-token"))
    if action != "rotate":
        return _page(request, context, status=400, error=f"Unknown action {action!r}.")
    form = RotateForm(request.POST)
    if not form.is_valid():
        return _page(request, context, confirm="rotate", form=form, status=400)
    expires_at = tokens.expiry_after(form.cleaned_data["expires_in_days"], now=db_now())
    _, key = tokens.issue(request.user, expires_at=expires_at)
    return _page(request, context, new_key=key)


def _page(request, context: dict, *, status: int = 200, form=None, **extra):
    context.update(
        token=tokens.live_token(request.user),
        form=form or RotateForm(),
        key_header_example=f"Authorization: Token {extra.get('new_key') or '<key>'}",
        **extra,
    )
    return TemplateResponse(request, "admin/accounts/my_token.html", context, status=status)

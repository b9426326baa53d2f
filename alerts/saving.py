"""Saving a channel: the one path the API and the admin share
(docs/guides/alerts.md "Channels").

1. ``look_up`` resolves the hosts the URL names before any transaction, with
   the request's deadline (jobs/lookups.py).
2. ``refusal`` judges the URL with those answers: apprise can read it, its
   hosts pass the outbound-address rules. Its message names no secret.
3. ``create`` / ``change_url`` store it encrypted, with its mask; the plain
   URL is shown once, by the caller, from what it was given.
"""

from __future__ import annotations

from alerts import channels
from alerts.models import Channel
from jobs import crypto, lookups


def look_up(url: object, *, owner_id: int) -> lookups.Answers:
    return lookups.look_up_hosts(channels.stand_in_urls(url), owner=owner_id)


def refusal(url: str, answers: lookups.Answers) -> str | None:
    try:
        channels.check(url, resolve=answers)
    except channels.BadChannelURL as exc:
        return str(exc)
    return None


def create(owner, name: str, url: str) -> Channel:
    return Channel.objects.create(
        owner=owner, name=name, url_encrypted=crypto.encrypt(url), masked=channels.mask(url)
    )


def change_url(channel: Channel, url: str) -> None:
    channel.url_encrypted = crypto.encrypt(url)
    channel.masked = channels.mask(url)

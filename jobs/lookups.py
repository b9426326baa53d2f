"""Save-time host lookups: every host name a request's webhook URLs name,
looked up at once, with one deadline for the whole request, before any
transaction (docs/security.md "Host lookups when a job is saved").

Saving a job resolves its URL's host name (``jobs.targets.check_url``
refuses a name that leads to a private address). The system resolver has no
deadline a caller can set, and a name's owner decides how slowly their DNS
server answers: looked up one after another on a web thread, inside the
Idempotency-Key's transaction, a list of slow names held a thread for hours
and a connection ``idle in transaction`` all that while. So the API and the
admin call ``look_up_hosts`` before they open a transaction, and hand its
``Answers`` to ``check_url`` as the resolver:

1. The request's distinct host names are collected (an IP address needs no
   lookup). More than ``PUNCTUAL_MAX_TARGET_HOSTS`` refuses the request
   whole (``TooManyHosts``), before any lookup.
2. Each name is looked up in a thread of its own, at once, drawn from a
   process-wide budget (``LOOKUP_THREADS``), of which one owner's lookups
   may hold at most ``LOOKUPS_PER_OWNER`` at a time, counting their
   lookups still running from earlier requests. A name without a free
   thread waits for one, within the deadline.
3. The request waits ``PUNCTUAL_TARGET_LOOKUP_SECONDS`` at most, in all. A
   name not answered by then is refused ("try again"), never saved
   unchecked. A lookup already started runs on in its thread until the
   system resolver gives up, holding its share of the budget: the web
   thread is free, and the threads stuck in lookups are bounded per
   process, and per owner, whatever the requests.

Delivery resolves again and vets every answer (dispatch/webhooks.py): that
is the guard against a name re-pointed after it was saved.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Hashable, Iterable

from django.conf import settings

from jobs import targets
from jobs.targets import UnsafeTargetError

__all__ = ["LOOKUPS_PER_OWNER", "LOOKUP_THREADS", "Answers", "TooManyHosts", "look_up_hosts"]

# Threads that one web process lets lookups hold at once, and one owner's
# part of them. A thread waiting on a resolver costs little memory and no
# CPU; the bound is what keeps a flood of names that never answer from
# piling threads up without end.
LOOKUP_THREADS = 64
LOOKUPS_PER_OWNER = 16

Answer = list[str] | OSError | UnicodeError


class TooManyHosts(ValueError):
    """A request names more distinct host names than one request may look up."""


class Answers:
    """The answers of one request's lookups, as ``check_url``'s resolver."""

    def __init__(self, answers: dict[str, Answer], *, asked: set[str], seconds: float) -> None:
        self._answers = answers
        self._asked = asked
        self._seconds = seconds

    def __call__(self, host: str) -> list[str]:
        if host not in self._asked:
            # Every URL the save judges was looked up before it: one that was
            # not would have to be looked up now, inside the save's transaction.
            raise LookupError(f"{host} was not looked up before the save")
        answer = self._answers.get(host)
        if answer is None:
            raise UnsafeTargetError(
                f"could not resolve {host} within {self._seconds:g} s; try again"
            )
        if isinstance(answer, list):
            return answer
        raise answer


class _Budget:
    """The process's lookup threads: how many are free, and how many each
    owner's lookups hold (including those whose request stopped waiting)."""

    def __init__(self, threads: int, per_owner: int) -> None:
        self._free = threads
        self._per_owner = per_owner
        self._held: Counter[Hashable] = Counter()
        self._changed = threading.Condition()

    def resolve(self, hosts: list[str], *, owner: Hashable, seconds: float) -> dict[str, Answer]:
        """What each of ``hosts`` resolved to (addresses, or the error) within
        ``seconds``; a host missing from the result did not answer in time."""
        deadline = time.monotonic() + seconds
        answers: dict[str, Answer] = {}
        waiting = list(reversed(hosts))
        with self._changed:
            while True:
                while waiting and self._free > 0 and self._held[owner] < self._per_owner:
                    self._free -= 1
                    self._held[owner] += 1
                    host = waiting.pop()
                    thread = threading.Thread(
                        target=self._look_up,
                        args=(host, owner, answers),
                        name=f"lookup {host}",
                        # A lookup that never returns must not keep the
                        # process from exiting.
                        daemon=True,
                    )
                    try:
                        thread.start()
                    except RuntimeError:
                        # No thread to be had (the process's limit): give
                        # its place back, and try again when one finishes.
                        self._release(owner)
                        waiting.append(host)
                        break
                left = deadline - time.monotonic()
                if len(answers) == len(hosts) or left <= 0:
                    # A copy: answers that come in late are not this request's.
                    return dict(answers)
                self._changed.wait(left)

    def _look_up(self, host: str, owner: Hashable, answers: dict[str, Answer]) -> None:
        answer: Answer
        try:
            answer = targets.system_resolve(host)
        except (OSError, UnicodeError) as exc:
            answer = exc
        with self._changed:
            answers[host] = answer
            self._release(owner)
            self._changed.notify_all()

    def _release(self, owner: Hashable) -> None:
        """Give back a thread ``owner`` held (with the lock held)."""
        self._free += 1
        self._held[owner] -= 1
        if not self._held[owner]:
            del self._held[owner]


_budget = _Budget(LOOKUP_THREADS, LOOKUPS_PER_OWNER)


def host_names(urls: Iterable[object]) -> set[str]:
    """The host names among ``urls`` that a save would look up: those of the
    well-formed URLs whose host is not an IP address (a malformed URL is
    refused by ``check_url`` without a lookup)."""
    names = set()
    for url in urls:
        if not isinstance(url, str) or not url:
            continue
        try:
            host = targets.parse_target(url).raw_host
        except UnsafeTargetError:
            continue
        if host is not None and targets.ip_literal(host) is None:
            names.add(host)
    return names


def look_up_hosts(urls: Iterable[object], *, owner: Hashable) -> Answers:
    """Look up the host names of ``urls`` (the values a request sends as
    webhook URLs, of any type) for ``owner`` (any key: their id), all at
    once, within ``PUNCTUAL_TARGET_LOOKUP_SECONDS``. Raise ``TooManyHosts``
    past ``PUNCTUAL_MAX_TARGET_HOSTS`` distinct names. Where the address
    rule is lifted (``PUNCTUAL_ALLOW_PRIVATE_TARGETS``) nothing is looked
    up: ``check_url`` does not ask."""
    names = host_names(urls)
    cap = settings.PUNCTUAL_MAX_TARGET_HOSTS
    if len(names) > cap:
        raise TooManyHosts(
            f"At most {cap:,} distinct host names per request (got {len(names):,});"
            " send the jobs in several requests."
        )
    seconds = settings.PUNCTUAL_TARGET_LOOKUP_SECONDS
    if not names or targets.configured_rule()["allow_private"]:
        return Answers({}, asked=names, seconds=seconds)
    answers = _budget.resolve(sorted(names), owner=owner, seconds=seconds)
    return Answers(answers, asked=names, seconds=seconds)

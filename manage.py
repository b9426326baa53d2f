#!/usr/bin/env python
"""Django's command-line utility for Punctual."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_site.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # Load the settings now: a setting that is missing or out of range is
        # the operator's to fix, and one line saying which says all there is.
        settings.INSTALLED_APPS  # noqa: B018
    except ImproperlyConfigured as exc:
        sys.exit(f"manage.py: {exc}")
    try:
        execute_from_command_line(sys.argv)
    except KeyboardInterrupt:
        # Ctrl-C: the command was stopped on purpose; no traceback for it.
        sys.exit(130)


if __name__ == "__main__":
    main()

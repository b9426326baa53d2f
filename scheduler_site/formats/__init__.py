"""Date formats for the admin (FORMAT_MODULE_PATH): a scheduler's times need
seconds and a zone, not "Nov. 30, 2026, 1:53 a.m."."""

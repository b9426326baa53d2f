"""The REST API under /api/v1/ (PRODUCT.md §4)."""

from __future__ import annotations

urlpatterns: list = []

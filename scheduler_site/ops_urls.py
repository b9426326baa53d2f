"""Operations endpoints: health, metrics, the built-in demo receiver."""

from __future__ import annotations

urlpatterns: list = []

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """API tokens and the API's rate limits (README "Owners and access", "Rate limits")."""

    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

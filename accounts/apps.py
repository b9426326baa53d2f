from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """API tokens and the API's rate limits (docs/guides/owners.md "Owners and access";
    docs/guides/api.md "Rate limits")."""

    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

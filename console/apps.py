from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "ASE console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # checks: registers the system checks. celery: the configured Celery app becomes the current one in
        # every process (the web one too), so that shared tasks sent from a view (jobs) reach the configured
        # broker instead of Celery's default.
        from console import celery, checks  # noqa: F401

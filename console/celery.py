"""The Celery application: workers host the sending process, beat drives schedules."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("ase")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _install_worker_parts() -> None:
    from console.worker import SendingProcessStep

    app.steps["worker"].add(SendingProcessStep)


_install_worker_parts()

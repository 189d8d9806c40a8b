"""The Celery application; the agent loop's workers run from here."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_console.settings")

app = Celery("harness_console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

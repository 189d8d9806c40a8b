from __future__ import annotations

from django.apps import AppConfig


class EvalsConfig(AppConfig):
    """The eval set (SPEC E1): its cases, the suite runner, its pages and its records."""

    name = "evals"
    verbose_name = "Eval set"

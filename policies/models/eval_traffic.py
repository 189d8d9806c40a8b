"""The eval set's traffic stays out of everyone's way (SPEC E1): one queryset for every model
whose rows the eval set makes or drives — its agents, workspaces, policies, MCP servers
and their tools, and the runs, tool calls, approvals and rollups of its agents.

Each model names the lookup that says a row belongs to the eval set (``EVAL_FLAG``); every
listing, dropdown and figure asks ``without_evals()``, and the evals pages
``of_evals()``. The admin hides them the same way (``harness_console.web.admin``)."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from django.db import models


class EvalTraffic(models.QuerySet[Any]):
    def without_evals(self) -> Self:
        """Everything but the eval set's rows. A row not tied to an agent (a tool call made
        with ``manage.py call_tool``, a hook bound to every agent) is everyone's."""
        return self.exclude(**{self.model.EVAL_FLAG: True})

    def of_evals(self) -> Self:
        return self.filter(**{self.model.EVAL_FLAG: True})


class EvalAware(models.Model):
    """A model whose rows may be the eval set's: it says how to tell (``EVAL_FLAG``)."""

    EVAL_FLAG: ClassVar[str] = "for_evals"
    objects = EvalTraffic.as_manager()

    class Meta:
        abstract = True

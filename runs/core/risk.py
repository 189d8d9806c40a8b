"""Transitional: the risk levels' old address, until its last importers move.

Risk assessment now lives in :mod:`runs.core.intake.risk` and the levels in
:mod:`approvals.core.risk`. ``approvals/forms.py`` and ``approvals/notifications.py`` still
import ``LEVELS`` from here; once they import it from :mod:`approvals.core.risk`, delete
this module.
"""

from __future__ import annotations

from approvals.core.risk import LEVELS, Level

__all__ = ["LEVELS", "Level"]

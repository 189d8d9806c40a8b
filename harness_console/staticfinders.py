"""Serves plotly.js from the plotly package itself: no CDN, no copy in the repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


class PlotlyFinder(BaseFinder):
    """Exposes only ``plotly.min.js``; the rest of ``package_data`` would add 9.6 MB."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(PLOTLY_JS.parent))
        self.storage.prefix = "vendor"  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list:
        return []

    def find(  # type: ignore[override]  # one signature for the stubs' two overloads
        self, path: str, find_all: bool = False, **kwargs: Any
    ) -> str | list[str]:
        if path == PLOTLY_STATIC_PATH:
            return [str(PLOTLY_JS)] if find_all else str(PLOTLY_JS)
        return [] if find_all else ""

    def list(self, ignore_patterns: Any):
        yield PLOTLY_JS.name, self.storage

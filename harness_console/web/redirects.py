"""Where a form may send its user back to: only a page of this site."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme


def safe_next(request: HttpRequest, target: object) -> str:
    """``target`` when it is a path of this site (so a crafted link cannot send the user
    elsewhere after a decision), else "". Only an absolute path: no scheme, no host, no
    backslash (which browsers read as a slash), no control character."""
    if not isinstance(target, str) or not target.startswith("/") or "\\" in target:
        return ""
    if any(ord(c) < 32 or ord(c) == 127 for c in target):  # a header cannot hold them
        return ""
    allowed = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if allowed else ""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from .navigation import navigation
from .roles import APPROVER


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send each user to the first page their role opens (an approver: the queue they work
    from); a user with no role is told why."""
    items = navigation(request)["nav"]
    if request.user.groups.filter(name=APPROVER).exists():
        return redirect(reverse("approvals:queue"))
    if items:
        return redirect(reverse(items[0][2]))
    return render(request, "home_no_role.html", status=403)

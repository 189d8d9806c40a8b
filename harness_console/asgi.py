"""ASGI entry point for daphne: HTTP through Django, WebSockets through Channels.

WebSockets pass the allowed-hosts origin check (a page on another site cannot open one with
the user's cookies) and the session authentication before any consumer sees them.
"""

from __future__ import annotations

import os
from typing import Any, cast

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_console.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from harness_console.web.request_threads import PooledThreadsASGIHandler  # noqa: E402

django_asgi_app = PooledThreadsASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from approvals.routing import websocket_urlpatterns as approval_sockets  # noqa: E402
from evals.routing import websocket_urlpatterns as eval_sockets  # noqa: E402
from runs.routing import websocket_urlpatterns  # noqa: E402

sockets = websocket_urlpatterns + approval_sockets + eval_sockets
application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(cast(Any, sockets)))
        ),
    }
)

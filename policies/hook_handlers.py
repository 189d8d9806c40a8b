"""The shipped hook handlers made buildable: each one's factory (settings → handler), beside
its spec in :mod:`policies.core.hook_handlers`, and :func:`handler_build`.

Why the factories live here, outside the core, rather than a webhook sender being passed to
a builder in the core: the ``webhook-notifier``'s factory checks its URL with ``urllib.parse``
before its handler ever POSTs with ``urllib.request``, so a sender passed in would have to
carry part of the settings check with it, and every caller (the model's ``clean()``, the
admin form through it, the loop's bindings, the tests) would have to pass the right one; a
caller handed a stand-in would accept settings the loop then cannot build. Here every path
builds through one function and one table, so what the admin accepts is exactly what the
loop runs. What is pure (names, schemas, phases, the summary a webhook sends) stays in core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from . import hook_webhook
from .core import hook_freeze, hook_redaction
from .core.hook_handlers import HANDLERS, settings_check
from .core.hook_runner import HookHandler

Factory = Callable[[Mapping[str, Any]], HookHandler]

FACTORIES: Final[Mapping[str, Factory]] = MappingProxyType(
    {
        "secret-redaction": hook_redaction.secret_redaction,
        "change-freeze": hook_freeze.change_freeze,
        "webhook-notifier": hook_webhook.webhook_notifier,
    }
)
if set(FACTORIES) != set(HANDLERS):  # a spec the admin may choose must always build
    raise RuntimeError(
        f"Hook handler specs {sorted(HANDLERS)} and factories {sorted(FACTORIES)} differ."
    )


def handler_build(name: str, settings: Any) -> HookHandler:
    """The handler ``name`` configured by ``settings``, or HookSettingsError saying why not:
    the schema first, then the factory's own checks (a regex that does not compile, a URL
    that is not http), each failure naming the setting."""
    settings_check(name, settings)
    return FACTORIES[name](settings)

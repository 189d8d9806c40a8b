"""The model clients of SPEC R11: the real ``anthropic`` SDK, and an offline replay.

The Anthropic client takes its key from the environment only (``ANTHROPIC_API_KEY``; never
from the database, a form or a log), sets its own timeout on every call (the SDK's default
read timeout is 600 s), and retries itself, boundedly: the SDK obeys ``retry-after`` with
no cap, so its own retries are off and ours cap each wait and the whole call.

One SDK client per process per (key, base URL, timeout), shared by every run the process
drives: building one costs about 16 ms of CPU (its TLS context), and the client (an httpx
connection pool) is made to be shared between threads.

The SDK is imported where a model is called, not with this module: its import costs about
1.4 s of CPU, and every process of the console imports this module (the URL conf reaches it
through the pages that say whether a key is set), while only the run worker calls the
model. That worker imports it as it starts (:func:`sdk_preload`), so its first run does not
wait on the import.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .core.model_turns import (
    ANTHROPIC,
    OFFLINE_REPLAY,
    ModelError,
    ModelTurn,
    ToolUse,
    Usage,
)

if TYPE_CHECKING:
    import anthropic

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
MAX_WAIT_SECONDS = 8.0


def _turn_from(response: Any, label: str) -> ModelTurn:
    content = tuple(block.model_dump(exclude_none=True) for block in response.content)
    usage = response.usage
    return ModelTurn(
        stop_reason=response.stop_reason or "end_turn",
        text="".join(b.get("text", "") for b in content if b.get("type") == "text"),
        tool_uses=tuple(
            ToolUse(b["id"], b["name"], dict(b.get("input") or {}))
            for b in content
            if b.get("type") == "tool_use"
        ),
        usage=Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_creation_input_tokens=getattr(usage, "cache_creation_input_tokens", 0) or 0,
            cache_read_input_tokens=getattr(usage, "cache_read_input_tokens", 0) or 0,
        )
        if usage is not None
        else Usage(reported=False),
        model=response.model,
        label=label,
        request_id=getattr(response, "_request_id", None) or "",
        content=content,
    )


def system_blocks(stable: str, variable: str = "") -> list[dict[str, Any]]:
    """The system prompt in two blocks: the stable layers (identity, instructions, rules)
    marked for prompt caching, then what changes every run."""
    blocks: list[dict[str, Any]] = []
    if stable:
        blocks.append({"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}})
    if variable:
        blocks.append({"type": "text", "text": variable})
    return blocks


def sdk_preload() -> None:
    """Import the SDK now, in a process about to drive runs (``runs.tasks``)."""
    import anthropic  # noqa: F401


_clients: dict[tuple[str, str | None, float], anthropic.Anthropic] = {}
_clients_lock = threading.Lock()
# A forked child (a prefork pool process) must not share its parent's open connections.
os.register_at_fork(after_in_child=_clients.clear)


def shared_client(key: str, *, base_url: str | None, timeout: float) -> anthropic.Anthropic:
    """This process's client for these settings, made on first use. Keyed by a digest of
    the API key, so a rotated key (a changed environment) gets a client of its own and the
    key itself is kept only where the SDK keeps it."""
    import anthropic

    digest = hashlib.sha256(key.encode()).hexdigest()
    found = (digest, base_url, timeout)
    client = _clients.get(found)
    if client is None:
        with _clients_lock:
            client = _clients.get(found)
            if client is None:
                client = anthropic.Anthropic(
                    api_key=key, base_url=base_url, timeout=timeout, max_retries=0
                )
                _clients[found] = client
    return client


class AnthropicModel:
    label = ANTHROPIC

    def __init__(
        self,
        model: str,
        *,
        timeout: float = 60.0,
        attempts: int = 3,
        deadline: float = 180.0,
        max_tokens: int = 4096,
        base_url: str | None = None,
    ) -> None:
        key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
        if not key:
            raise ModelError("ANTHROPIC_API_KEY is not set; the offline replay model needs none.")
        self.model, self.attempts, self.deadline = model, attempts, deadline
        self.max_tokens = max_tokens
        self._client = shared_client(
            key,
            base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or None,
            timeout=timeout,
        )

    def __repr__(self) -> str:  # never the key
        return f"AnthropicModel({self.model!r})"

    def complete(
        self,
        *,
        system: list[dict[str, Any]],
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
    ) -> ModelTurn:
        import anthropic

        started = time.monotonic()
        for attempt in range(1, self.attempts + 1):
            try:
                response = self._client.messages.create(
                    model=self.model,
                    max_tokens=self.max_tokens,
                    # The SDK's typed params are TypedDicts; ours are the same JSON shapes.
                    system=cast(Any, system),
                    messages=cast(Any, list(messages)),
                    tools=cast(Any, list(tools) or anthropic.NOT_GIVEN),
                )
                return _turn_from(response, self.label)
            except anthropic.APIStatusError as error:
                retryable = error.status_code in RETRYABLE_STATUS
                wait = _retry_after(error.response) if retryable else None
                problem = f"the model API answered {error.status_code}"
            except (anthropic.APITimeoutError, anthropic.APIConnectionError) as error:
                retryable, wait = True, None
                problem = (
                    "the model API did not answer in time"
                    if isinstance(error, anthropic.APITimeoutError)
                    else "the model API could not be reached"
                )
            if not retryable or attempt == self.attempts:
                raise ModelError(
                    f"{problem} (attempt {attempt} of {self.attempts})", retryable=retryable
                )
            jitter = 1 + random.random() / 4  # noqa: S311 - spreading retries, not secrecy
            backoff = 0.5 * 2 ** (attempt - 1) * jitter
            pause = min(MAX_WAIT_SECONDS, wait if wait is not None else backoff)
            if time.monotonic() - started + pause > self.deadline:
                raise ModelError(
                    f"{problem}; no time left to retry within {self.deadline:g} s", retryable=True
                )
            time.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover


def _retry_after(response: Any) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after")))
    except (TypeError, ValueError):
        return None


class ReplayModel:
    """Plays recorded model turns in order, for the demo, the tests and the eval set.
    Labelled "offline replay" wherever a run shows its model."""

    label = OFFLINE_REPLAY

    def __init__(self, turns: Sequence[dict[str, Any]], model: str = "replay") -> None:
        self.turns, self.model, self.position = list(turns), model, 0

    @classmethod
    def from_file(cls, path: Path | str) -> ReplayModel:
        try:
            data = json.loads(Path(path).read_text("utf-8"))
        except (OSError, ValueError) as error:
            raise ModelError(f"The replay script {path} cannot be read: {error}") from None
        turns = data.get("turns") if isinstance(data, dict) else None
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise ModelError(f"The replay script {path} needs a list of turns.")
        return cls(turns, model=str(data.get("model", "replay")))

    def complete(
        self,
        *,
        system: list[dict[str, Any]],
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
    ) -> ModelTurn:
        if self.position >= len(self.turns):
            raise ModelError(f"The replay script has no turn {self.position + 1}.")
        turn = self.turns[self.position]
        self.position += 1
        content = tuple(turn.get("content") or ())
        given = turn.get("usage")
        reported = isinstance(given, dict)
        usage: dict[str, Any] = given if isinstance(given, dict) else {}
        return ModelTurn(
            stop_reason=turn.get("stop_reason", "end_turn"),
            text="".join(b.get("text", "") for b in content if b.get("type") == "text"),
            tool_uses=tuple(
                ToolUse(b["id"], b["name"], dict(b.get("input") or {}))
                for b in content
                if b.get("type") == "tool_use"
            ),
            usage=Usage(
                **{
                    k: int(usage.get(k, 0))
                    for k in (
                        "input_tokens",
                        "output_tokens",
                        "cache_creation_input_tokens",
                        "cache_read_input_tokens",
                    )
                },
                reported=reported,
            ),
            model=self.model,
            label=self.label,
            request_id=f"replay-{self.position}",
            content=content,
        )


def model_for_run(run: Any, *, position: int = 0) -> AnthropicModel | ReplayModel:
    """The run's model: its replay script (resumed at ``position``, the model calls already
    recorded), or the agent's Anthropic model."""
    if run.replay_script:
        model = ReplayModel.from_file(run.replay_script)
        model.position = position
        return model
    from django.conf import settings

    return AnthropicModel(
        run.agent.model,
        timeout=settings.HARNESS_MODEL_TIMEOUT_SECONDS,
        deadline=settings.HARNESS_MODEL_DEADLINE_SECONDS,
    )


def model_key_set() -> bool:
    """Whether the Anthropic model can be used (the key itself is never shown anywhere)."""
    return bool(os.environ.get("ANTHROPIC_API_KEY", "").strip())

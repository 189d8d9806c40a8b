"""Verify (SPEC R4, T3): every draft is validated by runValidation; a draft with problems
sends the model back for one more turn to fix it (local autonomy, at most
MAX_VERIFY_ROUNDS rounds and never past max_turns), else the run fails saying why."""

from __future__ import annotations

from typing import Any

from ..models import Run
from .checkpoints import (
    checkpoint,
    defer_fields,
    defer_step,
    drafts_of,
    run_fail,
    run_fields_write,
    step_begin,
    step_end,
)
from .driver_state import Driver
from .harness_calls import harness_call, path_id
from .outcomes import NEXT, StageOutcome
from .retry import model_told, turns_left

MAX_VERIFY_ROUNDS = 2


def verify_stage(driver: Driver, run: Run) -> StageOutcome:
    data = dict(run.loop or {})
    rounds = int(data.get("verify_rounds", 0)) + 1
    drafts = drafts_of(run)
    if not drafts:  # nothing to check: with the stage before's writes, and the next's
        verification = _validated(driver, run, drafts, rounds)
        defer_step(
            driver,
            run,
            "verify",
            {"drafts": drafts, "round": rounds},
            verification=verification["result"],
            output=verification,
            input_artifacts=drafts,
        )
        defer_fields(
            driver,
            run,
            verification=verification,
            stage="approval",
            loop={**data, "verify_rounds": rounds},
        )
        driver.current = True
        return NEXT
    with checkpoint(driver):
        step = step_begin(run, "verify", {"drafts": drafts, "round": rounds})
    verification = _validated(driver, run, drafts, rounds)
    problems = verification["problems"]
    with checkpoint(driver):
        run_fields_write(run, verification=verification)
        step_end(
            step,
            status="failed" if problems else "completed",
            verification=verification["result"],
            output=verification,
            input_artifacts=drafts,
        )
        if problems and rounds < MAX_VERIFY_ROUNDS and turns_left(run):
            _retry(driver, run, data, problems, rounds)
            return NEXT
        if not problems:
            run_fields_write(run, stage="approval", loop={**data, "verify_rounds": rounds})
            return NEXT
    first = problems[0]
    return run_fail(
        driver.lease, f"verification failed: {first['path']}: {first.get('message', first)}"
    )


def _validated(driver: Driver, run: Run, drafts: list[str], rounds: int) -> dict[str, Any]:
    checked, problems, unchecked = [], [], []
    for path in drafts:
        record = harness_call(
            driver, run, "runValidation", {"path": path}, f"verify:{rounds}:{path_id(path)}"
        )
        if record.status != "ok":
            unchecked.append({"path": path, "why": record.error})
            continue
        checked.append(path)
        for problem in (record.output or {}).get("problems") or []:
            problems.append({"path": path, **problem})
    return {
        "result": "fail" if problems else ("pass" if drafts else "skipped"),
        "round": rounds,
        "checked": checked,
        "unchecked": unchecked,
        "problems": problems[:50],
    }


def _retry(
    driver: Driver, run: Run, data: dict[str, Any], problems: list[dict[str, Any]], rounds: int
) -> None:
    """Local autonomy: the model hears what failed and gets another turn to fix it. Inside
    the caller's checkpoint."""
    text = "Verification found problems in your drafts; fix them:\n" + "\n".join(
        f"- {p['path']}: {p.get('message', p)}" for p in problems[:20]
    )
    model_told(driver, run, text, {"verification": "fail"}, verify_rounds=rounds)

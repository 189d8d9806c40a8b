"""The intake pipeline of SPEC R1–R3: request → intent → risk → parameters →
missing-parameter gate → boundaries → approval decision → structured task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .boundaries import approval_decision, task_boundaries
from .classify import read_intent
from .extract import gate
from .request import NO_ANSWERS, checked_answers, checked_request
from .risk import assess_task_risk
from .task import StructuredTask
from .vocabulary import COMMAND


def intake(
    request: str,
    *,
    answers: Mapping[str, str] = NO_ANSWERS,
    available_tools: Sequence[str] = (),
) -> StructuredTask:
    """Turn a request (and the requester's answers so far) into a structured task (R1).

    1. Refuse what cannot be a task; fold the text the rules read.
    2. The intent: what the request asks to have done.
    3. The risk of the request and its answers; claims of safety are only recorded.
    4. Parameters per role; what is missing or refused becomes a question (R3).
    5. Boundaries (files and tools; the shell only for a task that needs a command run)
       and whether a person must approve.

    Run it again with more ``answers`` to resume after a question: intake is a pure
    function of its inputs, so the resumed task is exactly what one complete request gives.
    """
    text = checked_request(request)
    checked = checked_answers(answers)
    if isinstance(available_tools, str) or not all(isinstance(t, str) for t in available_tools):
        raise ValueError("available_tools must be a list of tool names")
    intent, evidence = read_intent(text)
    risk = assess_task_risk(text, checked)
    parameters, missing = gate(text, intent, checked)
    needs_command = COMMAND.search(text) is not None
    return StructuredTask(
        request=request,
        intent=intent,
        intent_evidence=evidence,
        risk=risk,
        parameters=parameters,
        missing=missing,
        boundaries=task_boundaries(
            intent, parameters, available_tools, needs_command=needs_command
        ),
        approval=approval_decision(intent, risk, needs_command=needs_command),
        answers=tuple(sorted(checked.items())),
    )

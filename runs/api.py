"""The runs API (SPEC X3): thin DRF views over the run services, role-checked.

Session or token authentication (``manage.py drf_create_token <user>``). Bad input is a
400 with a message per field and stores nothing; a user without the right gets 403.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from harness_console.roles import may_see_runs, may_submit_runs
from harness_console.web.api import ModelFieldsOnce, service_call
from policies.models import Agent, Workspace

from .core import status as run_status
from .models import Artifact, ModelCall, Run, RunEvent, Step, ToolCall, WriteRecord
from .run_filters import status_matching
from .run_search import BadSearch, runs_searched
from .selectors import BadAfter, parse_after
from .services import run_answer, run_cancel, run_create, run_rollback
from .tools.rollback import RollbackRefused

EVENTS_LIMIT = 500


class CanSeeRuns(BasePermission):
    message = "Your role may not see runs."

    def has_permission(self, request: Request, view: Any) -> bool:
        return may_see_runs(request.user)


class StepSerializer(ModelFieldsOnce):
    step_id = serializers.CharField(source="name")

    class Meta:
        model = Step
        fields = [
            "index",
            "step_id",
            "status",
            "input",
            "output",
            "input_artifacts",
            "output_artifacts",
            "verification",
            "error",
            "started_at",
            "finished_at",
        ]


class ToolCallSerializer(ModelFieldsOnce):
    approved_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = ToolCall
        fields = [
            "id",
            "tool_use_id",
            "tool",
            "arguments",
            "path",
            "decision",
            "rule",
            "reason",
            "status",
            "output",
            "error",
            "approved_by",
            "started_at",
            "finished_at",
        ]


class ModelCallSerializer(ModelFieldsOnce):
    """One model call with its token use and what it cost (SPEC O4): ``cost_basis`` says
    whether the cost is reported (the provider's counts), estimated (counted here) or
    unpriced (no price for the model: ``cost_usd`` is null). ``context`` is what the
    prompt held (B12): each system layer's tokens against its budget with what it dropped
    or cut and why (left out when nothing), the tool definitions, the conversation after
    compaction and its tier."""

    cost_usd = serializers.DecimalField(max_digits=20, decimal_places=9, read_only=True)
    price_version = serializers.IntegerField(source="price.version", default=None, read_only=True)

    class Meta:
        model = ModelCall
        fields = [
            "turn",
            "label",
            "model",
            "stop_reason",
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "latency_ms",
            "cost_usd",
            "cost_basis",
            "price_version",
            "context",
            "created_at",
        ]


class RunSerializer(ModelFieldsOnce):
    """The run record of SPEC R7."""

    run_id = serializers.UUIDField(source="id", read_only=True)
    agent: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    workspace: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    requester: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    missing_parameters = serializers.SerializerMethodField()
    waiting_for = serializers.CharField(read_only=True)  # "answer", "approval" or ""
    model = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField()
    cost_usd = serializers.DecimalField(max_digits=20, decimal_places=9, read_only=True)
    # The seed's state stays in ``status`` (a cancelled run is failed, kind cancelled);
    # ``shown_status`` is what the console shows: ``cancelled`` for it.
    shown_status = serializers.CharField(read_only=True)

    class Meta:
        model = Run
        fields = [
            "id",
            "run_id",
            "agent",
            "workspace",
            "requester",
            "request",
            "status",
            "shown_status",
            "stage",
            "risk",
            "task",
            "missing_parameters",
            "waiting_for",
            "failure_reason",
            "failure_kind",
            "model",
            "progress",
            "usage",
            "cost_usd",
            "cost_basis",
            "verification",
            "compaction",
            "created_at",
            "started_at",
            "finished_at",
        ]

    def get_missing_parameters(self, run: Run) -> list[dict[str, str]]:
        return list((run.task or {}).get("missing") or [])

    def get_model(self, run: Run) -> dict[str, str]:
        return {"label": run.model_label, "name": run.model_name}

    def get_progress(self, run: Run) -> dict[str, int]:
        state = (run.loop or {}).get("state") or {}
        return {"turn": int(state.get("turn", 0)), "max_turns": run.agent.max_turns}

    def get_usage(self, run: Run) -> dict[str, int]:
        return {
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cache_creation_input_tokens": run.cache_creation_input_tokens,
            "cache_read_input_tokens": run.cache_read_input_tokens,
        }


class RunDetailSerializer(RunSerializer):
    steps = StepSerializer(many=True, read_only=True)
    model_calls = serializers.SerializerMethodField()
    tool_calls = serializers.SerializerMethodField()
    artifacts = serializers.SerializerMethodField()
    rollback = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [
            *RunSerializer.Meta.fields,
            "steps",
            "model_calls",
            "tool_calls",
            "artifacts",
            "rollback",
            "effective_config",
        ]

    def get_model_calls(self, run: Run) -> list[dict[str, Any]]:
        calls = run.model_calls.select_related("price").order_by("turn")
        return list(ModelCallSerializer(calls, many=True).data)

    def get_tool_calls(self, run: Run) -> list[dict[str, Any]]:
        calls = run.tool_calls.select_related("approved_by").order_by("started_at")
        return list(ToolCallSerializer(calls, many=True).data)

    def get_artifacts(self, run: Run) -> list[dict[str, Any]]:
        return [
            {"id": str(a.pk), "kind": a.kind, "size": a.size, "sha256": a.sha256}
            for a in Artifact.objects.filter(tool_call__run=run).order_by("created_at")
        ]

    def get_rollback(self, run: Run) -> list[dict[str, Any]]:
        return [
            {
                "path": w.path,
                "diff": w.diff,
                "command": w.rollback,
                "rolled_back_at": w.rolled_back_at,
            }
            for w in WriteRecord.objects.filter(tool_call__run=run).order_by("created_at", "order")
        ]


class RollbackSerializer(RunSerializer):
    """The rolled-back run, and the paths whose bytes were restored."""

    restored = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "restored"]


class RollbackRefusedSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="Why nothing was undone (a file that changed).")


class RunCreateSerializer(serializers.Serializer):
    # The eval set's own agents and workspaces run its cases only.
    agent = serializers.SlugRelatedField(slug_field="slug", queryset=Agent.objects.without_evals())
    workspace = serializers.SlugRelatedField(
        slug_field="slug", queryset=Workspace.objects.without_evals()
    )
    request = serializers.CharField(max_length=20_000, trim_whitespace=True)


class AnswerSerializer(serializers.Serializer):
    answers = serializers.DictField(child=serializers.CharField(max_length=2000), allow_empty=False)


class EventSerializer(ModelFieldsOnce):
    class Meta:
        model = RunEvent
        fields = ["seq", "type", "payload", "created_at"]


class RunViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    permission_classes = [CanSeeRuns]
    lookup_value_regex = "[0-9a-fA-F-]{32,36}"

    def get_queryset(self) -> QuerySet[Run]:
        runs = Run.objects.select_related("agent", "workspace", "requester")
        if self.action != "list":
            return runs
        params = self.request.query_params
        errors = {}
        if (value := params.get("status")) is not None:
            if value not in run_status.SHOWN_STATUSES:
                choices = ", ".join(run_status.SHOWN_STATUSES)
                errors["status"] = [f"Unknown status; use one of {choices}."]
            runs = runs.filter(status_matching(value))
        if (value := params.get("agent")) is not None:
            runs = runs.filter(agent__slug=value)
        if (value := params.get("requester")) is not None:
            runs = runs.filter(requester__username=value)
        if value := params.get("q", "").strip():
            try:
                runs = runs_searched(runs, value)
            except BadSearch as error:
                errors["q"] = [str(error)]
        if errors:
            raise ValidationError(errors)
        return runs.order_by("-created_at")

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        if self.action == "create":
            return RunCreateSerializer
        if self.action == "retrieve":
            return RunDetailSerializer
        if self.action == "events":
            return EventSerializer
        if self.action == "answer":
            return AnswerSerializer
        return RunSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=list(run_status.SHOWN_STATUSES)),
            OpenApiParameter("agent", str, description="agent slug"),
            OpenApiParameter("requester", str, description="username"),
            OpenApiParameter(
                "q", str, description="words the request holds, all of them (full-text)"
            ),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not may_submit_runs(request.user):
            raise PermissionDenied("Your role may not submit runs.")
        incoming = RunCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        run = service_call(lambda: run_create(requester=request.user, **incoming.validated_data))
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "after", {"type": "integer", "minimum": 0}, description="the last seq you have"
            )
        ],
        responses=EventSerializer(many=True),
        description=(
            f"The run's events after ``after``, oldest first, at most {EVENTS_LIMIT}: a bare "
            "list, paged by asking again with the last ``seq`` received."
        ),
    )
    # Paged by ``after``, not limit/offset: the answer is the list itself.
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        try:
            after = parse_after(request.query_params.get("after"))
        except BadAfter as error:
            raise ValidationError({"after": [str(error)]}) from None
        events = RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:EVENTS_LIMIT]
        return Response(EventSerializer(events, many=True).data)

    @extend_schema(request=AnswerSerializer, responses=RunSerializer)
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        incoming = AnswerSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        run = service_call(
            lambda: run_answer(
                run=run, user=request.user, answers=incoming.validated_data["answers"]
            )
        )
        return Response(RunSerializer(run).data)

    @extend_schema(request=None, responses=RunSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        run = service_call(lambda: run_cancel(run=run, user=request.user))
        return Response(RunSerializer(run).data)

    @extend_schema(
        request=None, responses={200: RollbackSerializer, 409: RollbackRefusedSerializer}
    )
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        try:
            paths = service_call(lambda: run_rollback(run=run, user=request.user))
        except RollbackRefused as error:
            return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
        run.refresh_from_db()
        return Response({**RunSerializer(run).data, "restored": paths})

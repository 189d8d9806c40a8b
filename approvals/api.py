"""The approvals API (SPEC X3, P5): approvers list pending requests and decide them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from harness_console.roles import may_decide
from harness_console.web.api import ModelFieldsOnce, service_call
from runs.approval_outcomes import approval_decide, approvals_decide_group

from .core.hunks import hunks_of
from .core.patch import PatchError
from .groups import GROUP_LIMIT, action_id, same_action
from .models import ApprovalDecision, ApprovalRequest
from .outcomes import AlreadyDecided


class IsApprover(BasePermission):
    message = "Only approvers see and decide approval requests."

    def has_permission(self, request: Request, view: Any) -> bool:
        return may_decide(request.user)


class DecisionSerializer(ModelFieldsOnce):
    user: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = ApprovalDecision
        fields = [
            "user",
            "decision",
            "comment",
            "shown_digest",
            "edited_diff",
            "rejected_hunks",
            "accepted_digest",
            "decided_at",
        ]


class HunkSerializer(serializers.Serializer):
    path = serializers.CharField()
    hunk = serializers.IntegerField(help_text="Its number in its file, from 1.")
    header = serializers.CharField()


class ApprovalSerializer(ModelFieldsOnce):
    """Read only: the API decides through ``decide`` and can change nothing else (A6)."""

    run = serializers.UUIDField(source="run_id", read_only=True)
    agent = serializers.CharField(source="run.agent.slug", read_only=True)
    requester = serializers.CharField(source="run.requester.username", read_only=True)
    # Null until the request is decided (and for one that expired or was invalidated).
    decided_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    decisions = DecisionSerializer(many=True, read_only=True)
    # Requests with one ``same_action`` are the same action from several runs (B15):
    # ``decide-group`` decides them in one step.
    same_action = serializers.SerializerMethodField()
    # Each hunk of ``diff`` as ``rejected_hunks`` names it (B7); empty where the change
    # cannot be chosen hunk by hunk.
    hunks = serializers.SerializerMethodField()

    class Meta:
        model = ApprovalRequest
        read_only_fields = fields = [
            "id",
            "same_action",
            "run",
            "agent",
            "requester",
            "kind",
            "status",
            "status_reason",
            "tool",
            "arguments",
            "paths",
            "summary",
            "diff",
            "hunks",
            "edited_diff",
            "rejected_hunks",
            "accepted_digest",
            "rule",
            "reason",
            "risk",
            "strong_confirmation",
            "required_approvals",
            "digest",
            "file_hashes",
            "policy_version",
            "requested_at",
            "expires_at",
            "decided_at",
            "decided_by",
            "comment",
            "decisions",
        ]

    def get_same_action(self, approval: ApprovalRequest) -> str:
        return action_id(same_action(approval))

    @extend_schema_field(HunkSerializer(many=True))
    def get_hunks(self, approval: ApprovalRequest) -> list[dict[str, Any]]:
        if approval.hunks_refusal:
            return []
        try:
            refs = hunks_of(approval.diff)
        except PatchError:
            return []
        return [{"path": r.path, "hunk": r.number, "header": r.header} for r in refs]


class DecideSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    comment = serializers.CharField(required=False, allow_blank=True, max_length=4000, default="")
    confirm = serializers.CharField(required=False, allow_blank=True, max_length=1024, default="")
    remember = serializers.BooleanField(required=False, default=False)
    digest = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        required=False,
        allow_blank=True,
        default="",
        help_text="The digest of the request as you were shown it; a changed request refuses.",
    )
    edited_diff = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=1_000_000,
        default="",
        help_text="Approve this unified diff instead of the proposed one; it must apply.",
    )
    rejected_hunks = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField(min_value=1), max_length=1000),
        required=False,
        default=dict,
        help_text=(
            "Approve the change without these hunks: file path → hunk numbers (from 1, as "
            "`hunks` lists them). At least one hunk must stay; not with `edited_diff`."
        ),
    )


class GroupMemberSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    digest = serializers.RegexField(r"^[0-9a-f]{64}$")


class DecideGroupSerializer(serializers.Serializer):
    members = serializers.ListField(
        child=GroupMemberSerializer(), min_length=1, max_length=GROUP_LIMIT
    )
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    comment = serializers.CharField(required=False, allow_blank=True, max_length=4000, default="")
    confirm = serializers.CharField(required=False, allow_blank=True, max_length=1024, default="")


class ApprovalViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    permission_classes = [IsApprover]
    serializer_class = ApprovalSerializer
    lookup_value_regex = "[0-9a-fA-F-]{32,36}"

    def get_queryset(self) -> QuerySet[ApprovalRequest]:
        approvals = ApprovalRequest.objects.select_related(
            "run__agent", "run__requester", "decided_by"
        ).prefetch_related("decisions__user")
        if self.action == "list" and (value := self.request.query_params.get("status")):
            if value not in ApprovalRequest.Status.values:
                raise ValidationError(
                    {"status": [f"Use one of {', '.join(ApprovalRequest.Status.values)}."]}
                )
            approvals = approvals.filter(status=value)
            if value == ApprovalRequest.Status.PENDING:  # the queue's: never the eval set's
                approvals = approvals.without_evals()
        return approvals.order_by("requested_at")

    @extend_schema(
        parameters=[OpenApiParameter("status", str, enum=list(ApprovalRequest.Status.values))]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request=DecideSerializer, responses={200: ApprovalSerializer, 409: ApprovalSerializer}
    )
    @action(detail=True, methods=["post"])
    def decide(self, request: Request, pk: str | None = None) -> Response:
        approval = self.get_object()
        incoming = DecideSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            outcome = service_call(
                lambda: approval_decide(
                    approval=approval, user=request.user, **incoming.validated_data
                )
            )
        except AlreadyDecided as error:
            return Response(
                {"detail": str(error), **ApprovalSerializer(error.approval).data},
                status=status.HTTP_409_CONFLICT,
            )
        return Response(ApprovalSerializer(outcome.approval).data)

    @extend_schema(request=DecideGroupSerializer)
    @action(detail=False, methods=["post"], url_path="decide-group")
    def decide_group(self, request: Request) -> Response:
        """Identical requests (one ``same_action``) in one step, each decided on its own:
        ``decided`` lists those that were, ``refused`` the others with the reason."""
        incoming = DecideGroupSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        done = service_call(
            lambda: approvals_decide_group(
                members=[(str(m["id"]), m["digest"]) for m in data["members"]],
                user=request.user,
                decision=data["decision"],
                comment=data["comment"],
                confirm=data["confirm"],
            )
        )
        return Response(
            {
                "decided": [ApprovalSerializer(d.approval).data for d in done.decided],
                "refused": [{"id": str(a.pk), "reason": why} for a, why in done.refused],
            }
        )

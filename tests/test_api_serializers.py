"""The API's model serializers make their fields from the model once per class: each
instance still gets fields of its own, the same DRF would make."""

from __future__ import annotations

import pytest
from rest_framework.serializers import ModelSerializer

from approvals import api as approvals_api
from harness_console.web.api import ModelFieldsOnce
from runs import api as runs_api

SERIALIZERS = sorted(
    {
        value
        for module in (runs_api, approvals_api)
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, ModelFieldsOnce)
        and value is not ModelFieldsOnce
    },
    key=lambda cls: cls.__name__,
)


@pytest.mark.parametrize("serializer", SERIALIZERS, ids=lambda cls: cls.__name__)
def test_the_fields_made_once_are_the_fields_drf_makes(serializer):
    first, second = serializer(), serializer()
    fresh = ModelSerializer.get_fields(serializer())  # DRF's own, made now
    assert {k: repr(v) for k, v in first.fields.items()} == {k: repr(v) for k, v in fresh.items()}
    assert {k: repr(v) for k, v in second.fields.items()} == {k: repr(v) for k, v in fresh.items()}


def test_each_instance_has_fields_of_its_own():
    first, second = runs_api.RunSerializer(), runs_api.RunSerializer()
    assert first.fields["status"] is not second.fields["status"]
    first.fields["status"].help_text = "changed on one instance"
    assert runs_api.RunSerializer().fields["status"].help_text != "changed on one instance"
    assert second.fields["status"].help_text != "changed on one instance"

"""The API's own OpenAPI document as the judge of its answers.

The schema the console serves (drf-spectacular, OpenAPI 3.0) is turned into JSON Schema so
the reference validator (jsonschema, already a dependency) checks each body against the
operation and status it answered with: what a client generated from the schema expects.
"""

from __future__ import annotations

import re
from typing import Any

from jsonschema import Draft4Validator
from rest_framework.test import APIClient

# OpenAPI 3.0 Schema Objects are Draft 4 plus a few words of their own; ``nullable`` is the
# one that changes what is valid, so it is rewritten into JSON Schema's own null type.
_OPENAPI_ONLY = ("nullable", "readOnly", "writeOnly", "discriminator", "example", "xml")


def openapi_document(user) -> dict[str, Any]:
    client = APIClient()
    client.force_authenticate(user)
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200, response.content
    return response.json()


def as_json_schema(node: Any) -> Any:
    """A Schema Object as JSON Schema: ``nullable: true`` admits null, and an object with
    declared properties admits no other (an answer's every key is in the schema)."""
    if isinstance(node, list):
        return [as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {k: as_json_schema(v) for k, v in node.items() if k not in _OPENAPI_ONLY}
    if "properties" in converted and "additionalProperties" not in converted:
        converted["additionalProperties"] = False
    if not node.get("nullable"):
        return converted
    if "enum" in converted and None not in converted["enum"]:
        converted["enum"] = [*converted["enum"], None]
    if isinstance(converted.get("type"), str) and not ({"$ref", "allOf", "oneOf"} & set(node)):
        converted["type"] = [converted["type"], "null"]
        return converted
    return {"anyOf": [converted, {"type": "null"}]}


def operation_for(document: dict[str, Any], method: str, url_path: str) -> dict[str, Any] | None:
    """The operation whose templated path matches ``url_path`` (``{id}`` as one segment)."""
    for template, item in document["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, url_path) and method.lower() in item:
            return item[method.lower()]
    return None


def body_errors(document: dict[str, Any], operation: dict[str, Any], response: Any) -> list[str]:
    """Why this 2xx answer breaks its operation's schema (an empty list: it does not)."""
    status = str(response.status_code)
    declared = operation["responses"].get(status)
    if declared is None:
        return [f"status {status} is not in the schema ({sorted(operation['responses'])})"]
    content = declared.get("content", {}).get("application/json")
    if content is None:
        return [] if not response.content else [f"{status} has a body the schema does not give"]
    schema = {
        **as_json_schema(content["schema"]),
        "components": as_json_schema(document["components"]),
    }
    validator = Draft4Validator(schema)
    return [
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(response.json())
    ][:5]

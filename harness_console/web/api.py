"""What every API view shares: a service's Django errors as DRF's, the one pagination,
the parsers every body goes through, and model serializers that read their model once.

The pagination is the API's only page-number parser, so "a well-formed request never gets
a 500" holds for every list at once: ``limit`` is a whole number from 1, and one above
``MAX_PAGE_SIZE`` is served as the maximum (``next`` says so); ``offset`` is a whole
number from 0 to ``MAX_OFFSET``. Anything else — negative, zero, fractional, non-ASCII
digits, an offset beyond any list — is a 400 naming the parameter. The parsers refuse a
body with a NUL character, which no PostgreSQL text column or lookup accepts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.exceptions import ParseError, PermissionDenied, ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.serializers import ModelSerializer

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
# Far beyond any real list, and far inside every database's integers (SQLite's and
# PostgreSQL's are 64-bit): an offset past it is a mistake, not a page.
MAX_OFFSET = 2**31 - 1


def django_errors(error: DjangoValidationError) -> ValidationError:
    """A service's ValidationError as DRF's: a message per field."""
    if hasattr(error, "error_dict"):
        return ValidationError(
            {k: [str(m) for m in v[0].messages] for k, v in error.error_dict.items()}
        )
    return ValidationError({"detail": error.messages})


def service_call[T](call: Callable[[], T]) -> T:
    """Call a service the way every API view does: its ValidationError becomes a 400 with a
    message per field, its PermissionDenied a 403."""
    try:
        return call()
    except DjangoValidationError as error:
        raise django_errors(error) from None
    except DjangoPermissionDenied as error:
        raise PermissionDenied(str(error)) from None


def holds_nul(value: Any) -> bool:
    """A NUL character anywhere in a parsed body: a key, a value, a list item."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(holds_nul(item) for item in value)
    if hasattr(value, "lists"):  # a QueryDict from a form
        return any(holds_nul(k) or holds_nul(v) for k, v in value.lists())
    return False


class _RefusesNul:
    """Every API body is parsed by one of these: PostgreSQL stores no NUL in text, so a
    NUL reaching a lookup or a JSON column would be a 500 instead of a 400."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        parsed = super().parse(stream, media_type, parser_context)  # type: ignore[misc]
        if holds_nul(getattr(parsed, "data", parsed)):
            raise ParseError("NUL characters (\\u0000) are not accepted.")
        return parsed


class ConsoleJSONParser(_RefusesNul, JSONParser):
    pass


class ConsoleFormParser(_RefusesNul, FormParser):
    pass


class ConsoleMultiPartParser(_RefusesNul, MultiPartParser):
    pass


def _digits(raw: str, *, name: str, low: int) -> int:
    """``raw`` as a whole number of at least ``low``, or a 400 naming ``name``.

    Only ASCII digits (``int()`` would also take "٣", " 5" or "1_0"), and a value of more
    than 18 digits stands for "more than any bound here" (no 4,300-digit ``int()``).
    """
    if not (raw.isascii() and raw.isdigit()):
        raise ValidationError({name: [f"Give a whole number from {low}."]})
    digits = raw.lstrip("0") or "0"
    value = int(digits) if len(digits) <= 18 else 10**18
    if value < low:
        raise ValidationError({name: [f"Give a whole number from {low}."]})
    return value


class ConsolePagination(LimitOffsetPagination):
    """Limit/offset pages whose numbers are checked, never guessed (see the module)."""

    default_limit = DEFAULT_PAGE_SIZE
    max_limit = MAX_PAGE_SIZE

    def get_limit(self, request: Request) -> int:
        raw = request.query_params.get(self.limit_query_param)
        if raw is None:
            return DEFAULT_PAGE_SIZE
        # Above the maximum is capped, not refused: "as many as you can" is a fair request,
        # answered one full page at a time (``next`` carries the limit actually used).
        return min(_digits(raw, name="limit", low=1), MAX_PAGE_SIZE)

    def get_offset(self, request: Request) -> int:
        raw = request.query_params.get(self.offset_query_param)
        if raw is None:
            return 0
        value = _digits(raw, name="offset", low=0)
        if value > MAX_OFFSET:
            raise ValidationError({"offset": [f"Give a whole number from 0 to {MAX_OFFSET}."]})
        return value

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            "limit": {"minimum": 1, "maximum": MAX_PAGE_SIZE, "default": DEFAULT_PAGE_SIZE},
            "offset": {"minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        parameters[0]["description"] = (
            f"Results per page, 1 to {MAX_PAGE_SIZE} (a larger limit is served as "
            f"{MAX_PAGE_SIZE}; anything else is a 400)."
        )
        return parameters


class ModelFieldsOnce(ModelSerializer):
    """A ModelSerializer whose fields are made from the model once per class, then copied
    for each instance the way DRF copies the fields a class declares. DRF makes them anew
    for every instance (every field's options from the model, its label from the verbose
    name): a fifth of the CPU of the API's run submission, for the run it answers with.
    What a class's fields are depends on the class alone (its Meta and declarations)."""

    def get_fields(self) -> dict[str, Any]:
        cls = type(self)
        made = cls.__dict__.get("_fields_made")
        if made is None:
            made = super().get_fields()
            cls._fields_made = made  # type: ignore[attr-defined]
        return copy.deepcopy(made)

"""What every API view shares: a service's Django errors as DRF's."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.exceptions import PermissionDenied, ValidationError


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

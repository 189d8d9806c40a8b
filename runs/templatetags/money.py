"""Dollar amounts as people read them: cents for dollars, significant digits for fractions
of a cent (a single model call often costs $0.0009), never a float's noise."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django import template

register = template.Library()


@register.filter
def usd(value: Any) -> str:
    """``$12.35``, ``$0.35``, ``$0.00906``, ``$0``; empty for no amount."""
    if value is None or value == "":
        return ""
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return ""
    if amount == 0:
        return "$0"
    if abs(amount) >= 1:
        return f"${amount:,.2f}"
    if abs(amount) >= Decimal("0.01"):
        return f"${amount:.2f}" if abs(amount) >= Decimal("0.1") else f"${amount:.4f}".rstrip("0")
    # Four significant figures: $0.009953, $0.0000003.
    places = -amount.adjusted() + 3
    text = f"{amount.quantize(Decimal(1).scaleb(-places)):f}".rstrip("0").rstrip(".")
    return f"${text}"

"""What a model call cost (SPEC O4), from its token use and the price in force.

Anthropic reports ``input_tokens`` without the cache tokens, so each of the four counts is
priced once at its own rate: adding the cache tokens to the input as well (as tools that
read OpenTelemetry's ``gen_ai.usage.input_tokens`` do) would bill them twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Final

MILLION: Final = Decimal(1_000_000)
# Costs are kept to the nano-dollar: a single cache-read token of the cheapest model is
# $0.0000001, so nothing a price table can express is rounded away.
QUANTUM: Final = Decimal("0.000000001")

REPORTED: Final = "reported"  # the provider reported the token use; priced from the table
ESTIMATED: Final = "estimated"  # the provider reported none; the tokens were counted here
UNPRICED: Final = "unpriced"  # no price for the model: tokens kept, no cost claimed
REPLAY: Final = "replay"  # the offline replay: no provider was called, nothing was spent


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens of each kind; ``model`` matches a call's model name or
    its prefix (``claude-sonnet-4-6`` prices ``claude-sonnet-4-6-20260115``)."""

    id: int
    model: str
    effective_from: datetime
    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_read: Decimal


@dataclass(frozen=True)
class Tokens:
    input: int = 0  # excludes the cache tokens, as Anthropic reports it
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0


def cost_of(tokens: Tokens, price: Price) -> Decimal:
    """Dollars, to the nano-dollar; every token counted exactly once."""
    total = (
        tokens.input * price.input
        + tokens.output * price.output
        + tokens.cache_write * price.cache_write
        + tokens.cache_read * price.cache_read
    )
    return (total / MILLION).quantize(QUANTUM)


def price_in_force(prices: Iterable[Price], model: str, at: datetime) -> Price | None:
    """The price for ``model`` at ``at``: the longest matching model name wins (an exact
    name before a family prefix), then the newest version already in force."""
    best: Price | None = None
    for price in prices:
        if price.effective_from > at:
            continue
        if model != price.model and not model.startswith(price.model + "-"):
            continue
        if best is None or (len(price.model), price.effective_from, price.id) > (
            len(best.model),
            best.effective_from,
            best.id,
        ):
            best = price
    return best


def run_basis(current: str, call: str) -> str:
    """A run's basis after one more call: reported (or replay) only while every call is;
    a call without a usage report or a price makes the run's total an estimate."""
    basis = ESTIMATED if call == UNPRICED else call
    if not current or current == basis:
        return basis
    return ESTIMATED

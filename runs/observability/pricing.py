"""The price table (SPEC O4): which price a model call pays, and what the call cost."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from policies.config_stamp import config_stamp, stamp_kept, stamp_kept_forget

from ..models import ModelPrice
from .core import cost as core

PRICES = "prices"  # the table's key among what a process keeps under the config stamp


@dataclass(frozen=True)
class CallCost:
    cost_usd: Decimal | None
    basis: str  # runs.observability.core.cost: reported, estimated or unpriced
    price_id: int | None


def prices() -> list[core.Price]:
    """Every price version. A worker prices every model call: each process keeps the table
    while the config stamp holds (``policies.config_stamp.stamp_kept``), which a saved or
    deleted price version moves once it is committed."""
    return stamp_kept(PRICES, config_stamp(), _prices_read)


def _prices_read() -> list[core.Price]:
    return [
        core.Price(
            id=row.pk,
            model=row.model,
            effective_from=row.effective_from,
            input=row.input_per_mtok,
            output=row.output_per_mtok,
            cache_write=row.cache_write_per_mtok,
            cache_read=row.cache_read_per_mtok,
        )
        for row in ModelPrice.objects.all()
    ]


def prices_changed() -> None:
    """This process reads the table again at its next call (its own new version, before
    the commit moves the stamp for everyone)."""
    stamp_kept_forget(PRICES)


def call_cost(
    *, model: str, tokens: core.Tokens, reported: bool, at: datetime, replayed: bool = False
) -> CallCost:
    """What a call cost at ``at``; ``reported`` says whether the provider reported the
    token use (a cost from tokens counted here is an estimate). A replayed call reached
    no provider and cost nothing, whatever its scripted usage says."""
    if replayed:
        return CallCost(Decimal(0), core.REPLAY, None)
    price = core.price_in_force(prices(), model, at)
    if price is None:
        return CallCost(None, core.UNPRICED, None)
    basis = core.REPORTED if reported else core.ESTIMATED
    return CallCost(core.cost_of(tokens, price), basis, price.id)


def price_version_create(*, source: ModelPrice, user: Any = None) -> ModelPrice:
    """Save ``source`` (unsaved) as the next version of its model's price."""
    source.pk = None
    if user is not None and getattr(user, "is_authenticated", False):
        source.created_by = user
    for _attempt in range(3):  # two admins saving the same model at once: the next number
        latest = ModelPrice.objects.filter(model=source.model).aggregate(v=Max("version"))["v"]
        source.version = (latest or 0) + 1
        try:
            with transaction.atomic():
                source.save()
        except IntegrityError:
            source.pk = None
            continue
        prices_changed()  # for this transaction's own next calls; the commit moves the
        # config stamp, and every process reads the table again
        return source
    raise IntegrityError(f"Could not number a new price version for {source.model}.")

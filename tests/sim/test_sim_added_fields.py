"""The simulator adds fields to a merchant's records from a chosen moment, of a chosen type."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from recordsync.core.errors import ConfigurationError
from recordsync.sim import FIELD_KINDS, AddedField, MerchantProfile, SimConfig, Simulator


def test_every_kind_renders_valid_json_a_decimal_keeps_thirty_digits() -> None:
    fields = tuple(AddedField(f"f_{kind}", kind) for kind in FIELD_KINDS)
    sim = Simulator(SimConfig(history_days=0.1, rounds_per_day=100, added_fields=fields))
    truth = sim.truth()
    some = next(iter(truth.values()))
    assert {f"f_{kind}" for kind in FIELD_KINDS} <= set(some)
    store = sim._merchant(None).store
    text = store._render.record_text(0)
    value = json.loads(text, parse_float=Decimal)["f_decimal"]
    assert len(value.as_tuple().digits) == 30


def test_a_field_from_a_moment_is_carried_only_by_revisions_from_then_and_per_merchant() -> None:
    sim = Simulator(
        SimConfig(
            history_days=1,
            rounds_per_day=400,
            added_fields=(AddedField("tax", "integer", from_ms=2**62),),
            merchants=(
                MerchantProfile(
                    "other",
                    secret="s" * 43,
                    history_days=1,
                    rounds_per_day=400,
                    added_fields=(AddedField("tax", "integer"),),
                ),
            ),
        )
    )
    assert not any("tax" in record for record in sim.truth().values())
    assert all("tax" in record for record in sim.truth("other").values())


def test_an_unknown_kind_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="kind must be one of"):
        SimConfig(added_fields=(AddedField("x", "float"),))

"""Fields the simulated platform adds to its records, as the real one may (spec: Conventions
3: "responses may gain new fields"), so drift can be tested and shown.

Each ``AddedField`` is one member, of one JSON type, carried by every record whose revision
came at or after ``from_ms`` (platform time, the record's ``updated_at``), with a value drawn
from the change that made the revision: the same record at the same revision always shows
the same value, and a revision before the moment never shows the member, as a platform that
started writing it then would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class AddedField:
    name: str
    kind: str = "string"  # one of FIELD_KINDS
    from_ms: int = 0  # platform time (ms since the epoch) from which revisions carry it

    def problems(self) -> list[str]:
        found = []
        if not self.name or '"' in self.name or "\\" in self.name:
            found.append(f"added field {self.name!r}: a name without quotes or backslashes")
        if self.kind not in FIELD_KINDS:
            found.append(f"added field {self.name!r}: kind must be one of {', '.join(FIELD_KINDS)}")
        return found


# Each kind's value for the revision a change made.
_VALUES: Final[dict[str, Callable[[int], str]]] = {
    "string": lambda change: f'"{("web", "mobile", "kiosk")[change % 3]}"',
    # 30 significant digits: no float holds it.
    "decimal": lambda change: f"{12345678901234567890123456 + change}.{change % 10000:04d}",
    "integer": lambda change: str(change % 1000),
    "boolean": lambda change: "true" if change % 2 else "false",
    "null": lambda _change: "null",
    "object": lambda change: (
        f'{{"pool":"{change % 97}.50","tiers":[1,{change % 5}],"meta":{{"v":2}}}}'
    ),
    "array": lambda change: f'["a",{change % 7},true,null]',
}
FIELD_KINDS: Final = tuple(_VALUES)


def member_text(added: AddedField, change: int) -> str:
    """The member's JSON value for the revision ``change`` made."""
    return _VALUES[added.kind](change)


def members_text(fields: tuple[AddedField, ...], change: int, changed_ms: int) -> str:
    """``,"name":value`` for each field the revision carries; "" for none."""
    return "".join(
        f',"{added.name}":{member_text(added, change)}'
        for added in fields
        if changed_ms >= added.from_ms
    )

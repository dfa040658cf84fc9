"""The platform secret as a value that cannot be shown by accident.

Settings hold it, the client signs with it, the simulator checks with it: the type lives in the
core so that none of them depends on another for it.
"""

from __future__ import annotations

import hmac


class Secret:
    """Holds the secret so that no repr, str, log line or traceback local can show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(
            self._value.encode(), other._value.encode()
        )

    def __hash__(self) -> int:
        return hash(Secret)

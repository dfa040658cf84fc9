"""The platform secret as a value that cannot be shown by accident, and where it comes from.

Settings hold it, the client signs with it, the simulator checks with it: the type lives in the
core so that none of them depends on another for it.  Secrets rotate (spec: Authentication,
Key rotation), so a merchant's secret is configured as a ``SecretSource`` and the client asks a
``SecretProvider`` for the current one instead of holding a value for life.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

# spec: Authentication, "a secret (a 43-character string)".  A file's secret must have exactly
# this form: a file caught half-written holds a shorter one (or an empty one), and must not be
# taken for a rotated secret.
SECRET_LENGTH: Final = 43


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


def secret_from_file_bytes(data: bytes) -> Secret:
    """The secret a secret file holds: its UTF-8 text without one trailing line break, in the
    platform's form (``SECRET_LENGTH`` printable ASCII characters, no whitespace).

    One rule for the settings loader (which checks every file at start-up) and the keeper
    (which reads them for use, again and again).  The form is checked because a file being
    rewritten can be read half-way: a prefix of the new secret is never a secret.  Raises
    ``ValueError`` with a reason that never quotes the content (nor its length, a hint to
    it): a decoding error's own message would show a byte of it.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8 text") from None
    value = text.removesuffix("\n").removesuffix("\r")
    if not value:
        raise ValueError("is empty")
    if any(character.isspace() for character in value):
        raise ValueError("has whitespace inside the secret (one line, nothing else)")
    if not (value.isascii() and value.isprintable()):
        raise ValueError("holds characters other than printable ASCII")
    if len(value) != SECRET_LENGTH:
        raise ValueError(
            f"does not hold a {SECRET_LENGTH}-character secret (spec: Authentication); "
            "it may be half-written"
        )
    return Secret(value)


@dataclass(frozen=True, slots=True)
class SecretSource:
    """Where a merchant's secret comes from: given in the configuration, or a file.

    A file is named, not read, here: the core does no I/O.  The service's keeper reads it and
    reads it again when it changes, so a rotated secret is used without a restart.
    """

    value: Secret | None = None
    path: Path | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.path is None):
            raise ValueError("a secret source is either a value or a file, exactly one")

    @classmethod
    def given(cls, secret: Secret) -> SecretSource:
        return cls(value=secret)

    @classmethod
    def file(cls, path: Path) -> SecretSource:
        return cls(path=path)


class SecretProvider(Protocol):
    """What signs a request asks for the secret, at every attempt: the current one.

    A rotation thus applies from the next request, retries included.
    """

    def current(self) -> Secret: ...

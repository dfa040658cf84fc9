"""Reading the settings (the operators' contract): where a value comes from, how a problem reads.

Sources, strongest first: the environment (``RECORDSYNC_*``), then an optional TOML file
(``--config PATH``) with the same keys in lower case without the prefix, then defaults.
Every problem is collected and reported at once, one line each naming the variable (or, for a
``[[merchants]]`` entry, ``merchants[N] (id).key``), so an operator fixes the whole
configuration in one pass; the CLI turns ``ConfigurationError`` into exit code 2.
Modules receive this object; none of them reads the environment.

The merchants: one deployment may sync several.  They are either the single
merchant of ``RECORDSYNC_MERCHANT_ID`` / ``RECORDSYNC_SECRET`` or ``RECORDSYNC_SECRET_FILE`` /
``RECORDSYNC_BASE_URL`` / ``RECORDSYNC_HISTORY_FROM`` (the same keys at the top level of the
file), or the file's ``[[merchants]]`` entries, each with its ``merchant_id``, ``secret_file``
(or ``secret``) and optionally its own ``base_url`` and ``history_from``; the top-level
``base_url`` and ``history_from`` (the environment winning, as everywhere) are their defaults.
Naming merchants in both places is an error: which one was meant cannot be guessed.
The file is ``--config PATH``, else ``RECORDSYNC_CONFIG``.  A relative ``secret_file`` in a
``[[merchants]]`` entry is relative to the file's directory, not to the working directory: the
configuration and its secrets then travel together (a systemd unit's credentials directory,
whose path differs from unit to unit).

The settings check each secret file once, so that a missing, empty or malformed one is
reported with every other problem; reading it for use, and again when it rotates, is the
service's keeper's.  ``previous_secret_file`` (or ``previous_secret``; in the environment
``RECORDSYNC_PREVIOUS_SECRET_FILE``) optionally names the secret of before a rotation still
inside its overlap: a replica started during the overlap knows no previous secret otherwise.

The reader is our own rather than pydantic-settings: the error lines name the operator's
``RECORDSYNC_*`` variables and ``merchants[N] (id).key`` (pydantic's locations would have to be
translated back anyway), the cross-entry rules (one place for merchants, unique ids, per-key
defaults with the environment winning) are ours, and it keeps a validation library out of
the daemon's dependencies.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TypeVar

from recordsync.core.database_url import check_sqlite_folder, parse_database_url
from recordsync.core.errors import ConfigurationError, InvalidRecordError
from recordsync.core.secret import Secret, SecretSource, secret_from_file_bytes
from recordsync.core.settings.keys import (
    DEFAULT_DATABASE_URL,
    DEFAULTS,
    MERCHANT_KEYS,
    SETTING_KINDS,
    STALE_TICKS,
    MerchantSettings,
    Settings,
    variable,
)
from recordsync.core.settings.validators import BASE_URL, MERCHANT_ID, TIME, Kind

# The keys naming a merchant's secrets: with [[merchants]], they belong in the entries.
_SECRET_KEYS: Final = ("secret", "secret_file", "previous_secret", "previous_secret_file")

T = TypeVar("T")
D = TypeVar("D")


# -- reading values ------------------------------------------------------------------------------


def _text(value: object) -> str | None:
    """A TOML value as the text an environment variable would hold."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, datetime):
        # An unquoted TOML date-time; a naive one then fails the RFC3339 check, as it should.
        return value.isoformat()
    return str(value)


class _Reader:
    """Looks a key up in the environment, then the file's top level; collects problems
    (into lists shared by every reader of one load) instead of raising."""

    def __init__(
        self,
        environ: Mapping[str, str],
        file_values: Mapping[str, Any],
        problems: list[str],
        warnings: list[str],
    ) -> None:
        self.environ = environ
        self.file_values = file_values
        self.problems = problems
        self.warnings = warnings

    def name(self, key: str) -> str:
        """How a problem names ``key``: the operator's variable."""
        return variable(key)

    def either(self, first: str, second: str) -> str:
        return f"{self.name(first)} or {self.name(second)}"

    def origin(self, key: str) -> str:
        """Where ``key``'s value came from, for a conflict between two places."""
        if self.environ.get(variable(key)):
            return variable(key)
        return f"the top-level {key} in --config"

    def problem(self, key: str, message: str) -> None:
        self.problems.append(f"{self.name(key)}: {message}")

    def raw(self, key: str) -> str | None:
        env_value = self.environ.get(variable(key))
        if env_value is not None and env_value != "":
            return env_value
        return _text(self.file_values.get(key))

    def get(self, key: str, kind: Kind[T], default: D) -> T | D:
        """``key``'s value read by ``kind``; ``default`` when not given, or not readable (the
        problem is then collected)."""
        value = self.raw(key)
        if value is None:
            return default
        return self.read(key, value, kind, default)

    def read(self, key: str, value: str, kind: Kind[T], fallback: D) -> T | D:
        """``value`` read by ``kind``, or ``fallback`` and a problem naming ``key``."""
        try:
            return kind.parse(value)
        except (ValueError, InvalidRecordError):
            self.problem(key, f"{value[:60]!r} is not {kind.hint}")
            return fallback

    def required(self, key: str, *, what: str) -> str | None:
        value = self.raw(key)
        if value is None:
            self.problem(key, f"required ({what})")
        return value


class _EntryReader(_Reader):
    """One ``[[merchants]]`` entry: its own keys only (the defaults are applied by the caller),
    problems named ``merchants[N].key``, and ``merchants[N] (id).key`` once the id is known."""

    def __init__(
        self, entry: Mapping[str, Any], index: int, problems: list[str], warnings: list[str]
    ) -> None:
        super().__init__({}, entry, problems, warnings)
        self.where = f"merchants[{index}]"

    def name(self, key: str) -> str:
        return f"{self.where}.{key}"

    def either(self, first: str, second: str) -> str:
        return f"{self.where}.{first} or {second}"

    def raw(self, key: str) -> str | None:
        return _text(self.file_values.get(key))


def _database_url(reader: _Reader) -> str:
    """The warehouse URL, checked now so that a bad one is reported with every other problem
    (never quoted back: it may hold a password)."""
    url = reader.raw("database_url") or DEFAULT_DATABASE_URL
    try:
        parse_database_url(url)
        check_sqlite_folder(url)
    except ConfigurationError as exc:
        reader.problem("database_url", str(exc))
    return url


def _read_config_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigurationError(f"--config: {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"--config: {path} is not valid TOML ({exc})") from None


def _unknown_keys(file_values: Mapping[str, Any], problems: list[str]) -> None:
    """A misspelt key would otherwise be ignored, and its default used without a word."""
    known = {item.name for item in fields(Settings)} - {"warnings"} | set(MERCHANT_KEYS)
    problems.extend(f"--config: unknown key {key!r}" for key in file_values if key not in known)


# -- one merchant's values ------------------------------------------------------------------------


def _merchant_id(reader: _Reader) -> str | None:
    value = reader.required("merchant_id", what="sent as X-Merchant-Id")
    return None if value is None else reader.read("merchant_id", value, MERCHANT_ID, None)


def _secret_source(
    reader: _Reader, *, relative_to: Path | None = None, previous: bool = False
) -> SecretSource | None:
    """The secret given inline, or a secret file checked once now (readable, in the secret's
    form); with ``previous``, the optional ``previous_secret`` / ``previous_secret_file``.

    ``relative_to``: the directory a relative file is in (the config file's, for a
    ``[[merchants]]`` entry); otherwise the working directory's, as for any path.
    """
    key = "previous_secret" if previous else "secret"
    file_key = f"{key}_file"
    inline = reader.raw(key)
    secret_file = reader.raw(file_key)
    if inline is not None and secret_file is not None:
        reader.problems.append(
            f"{reader.name(key)} and {reader.name(file_key)} are both set: keep one of them"
        )
        return None
    if inline is not None:
        return SecretSource.given(Secret(inline))
    if secret_file is None:
        if not previous:
            reader.problems.append(
                f"{reader.either(key, file_key)}: one is required (the platform secret)"
            )
        return None
    path = Path(secret_file)
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        reader.problem(file_key, f"cannot read {path} ({exc.strerror})")
        return None
    # Group-readable is how a non-root container reads a mounted secret (root-owned, 0440,
    # the pod's fsGroup), so only a world-readable file is worth a warning.
    if mode & stat.S_IROTH:
        reader.warnings.append(
            f"{reader.name(file_key)}: {path} is readable by every user; chmod o-r it"
        )
    try:
        secret_from_file_bytes(data)
    except ValueError as exc:
        reader.problem(file_key, f"{path} {exc}")
        return None
    return SecretSource.file(path)


def _single_merchant(reader: _Reader, *, need_platform: bool) -> tuple[MerchantSettings, ...]:
    """The merchant of the single-merchant variables (no [[merchants]] in the file)."""
    base_url = secret = previous = None
    if need_platform:
        url = reader.required("base_url", what="the platform base URL, e.g. https://host")
        base_url = None if url is None else reader.read("base_url", url, BASE_URL, None)
        secret = _secret_source(reader)
        previous = _secret_source(reader, previous=True)
    merchant_id = _merchant_id(reader)
    history_from = reader.get("history_from", TIME, None)
    if merchant_id is None:
        return ()
    return (MerchantSettings(merchant_id, secret, base_url, history_from, previous),)


@dataclass(frozen=True, slots=True)
class _Defaults:
    """The top-level values every ``[[merchants]]`` entry starts from."""

    base_url: str | None
    base_url_given: bool  # given but invalid: reported once, not again per entry
    history_from: datetime | None
    config_dir: Path | None = None  # where a relative secret_file is


def _merchant_entry(
    entry: Mapping[str, Any],
    index: int,
    defaults: _Defaults,
    *,
    need_platform: bool,
    reader: _Reader,
) -> MerchantSettings | None:
    entry_reader = _EntryReader(entry, index, reader.problems, reader.warnings)
    merchant_id = _merchant_id(entry_reader)
    if merchant_id is not None:
        entry_reader.where += f" ({merchant_id})"
    entry_reader.problems.extend(
        f"{entry_reader.name(key)}: unknown key (an entry takes {', '.join(MERCHANT_KEYS)})"
        for key in entry
        if key not in MERCHANT_KEYS
    )
    base_url = secret = previous = None
    if need_platform:
        own_url = entry_reader.raw("base_url")
        if own_url is not None:
            base_url = entry_reader.read("base_url", own_url, BASE_URL, None)
        elif defaults.base_url is not None:
            base_url = defaults.base_url
        elif not defaults.base_url_given:
            entry_reader.problem(
                "base_url",
                f"required here, or for every merchant as the top-level base_url "
                f"({reader.name('base_url')})",
            )
        secret = _secret_source(entry_reader, relative_to=defaults.config_dir)
        previous = _secret_source(entry_reader, relative_to=defaults.config_dir, previous=True)
    history_from = entry_reader.get("history_from", TIME, defaults.history_from)
    if merchant_id is None:
        return None
    return MerchantSettings(merchant_id, secret, base_url, history_from, previous)


def _merchant_entries(
    reader: _Reader, entries: object, *, need_platform: bool, config_dir: Path | None = None
) -> tuple[MerchantSettings, ...]:
    """The ``[[merchants]]`` of the file, each with the top-level defaults applied."""
    problems = reader.problems
    for key in ("merchant_id", *_SECRET_KEYS):
        if reader.raw(key) is not None:
            problems.append(
                f"[[merchants]] in --config and {reader.origin(key)}: name the merchants and "
                "their secrets in one place, [[merchants]] or the single-merchant settings"
            )
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        problems.append("merchants: must be an array of tables, one [[merchants]] per merchant")
        return ()
    if not entries:
        problems.append("merchants: empty; add one [[merchants]] entry per merchant")
        return ()
    given_url = reader.raw("base_url") if need_platform else None
    default_url = None if given_url is None else reader.read("base_url", given_url, BASE_URL, None)
    defaults = _Defaults(
        base_url=default_url,
        base_url_given=given_url is not None,
        history_from=reader.get("history_from", TIME, None),
        config_dir=config_dir,
    )
    merchants: list[MerchantSettings] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries):
        merchant = _merchant_entry(
            entry, index, defaults, need_platform=need_platform, reader=reader
        )
        if merchant is None:
            continue
        seen = first_index.setdefault(merchant.merchant_id, index)
        if seen != index:
            problems.append(
                f"merchants[{index}] ({merchant.merchant_id}).merchant_id: a duplicate of "
                f"merchants[{seen}]; each merchant once"
            )
            continue
        merchants.append(merchant)
    return tuple(merchants)


# -- the whole ------------------------------------------------------------------------------------


def load_settings(
    environ: Mapping[str, str] | None = None,
    *,
    config_path: Path | None = None,
    need_platform: bool = True,
    need_merchant: bool = True,
) -> Settings:
    """Build the settings or raise ``ConfigurationError`` listing every problem, one per line.

    ``need_platform`` is false for commands that only touch the warehouse (``migrate``,
    ``status``, ``report``): no base URL or secret is asked for or read.  ``need_merchant`` is
    false for the commands on the whole warehouse (``migrate``, ``fields``): no merchant is
    read at all.
    """
    environ = os.environ if environ is None else environ
    env_config = environ.get(variable("config"))
    if config_path is None and env_config:
        config_path = Path(env_config)
    file_values = _read_config_file(config_path)
    problems: list[str] = []
    warnings: list[str] = []
    reader = _Reader(environ, file_values, problems, warnings)
    _unknown_keys(file_values, problems)

    merchants: tuple[MerchantSettings, ...] = ()
    if need_merchant:
        if "merchants" in file_values:
            merchants = _merchant_entries(
                reader,
                file_values["merchants"],
                need_platform=need_platform,
                config_dir=None if config_path is None else config_path.absolute().parent,
            )
        else:
            merchants = _single_merchant(reader, need_platform=need_platform)

    values = {key: reader.get(key, kind, DEFAULTS[key]) for key, kind in SETTING_KINDS.items()}
    settings = Settings(merchants=merchants, database_url=_database_url(reader), **values)
    if settings.page_size > 1000:  # noqa: PLR2004 - the spec's page-size ceiling
        reader.problem("page_size", f"{settings.page_size} is above 1000")
    if settings.events_port and settings.events_port == settings.http_port:
        reader.problem(
            "events_port",
            f"{settings.events_port} is RECORDSYNC_HTTP_PORT too: the events port faces the "
            "platform, /metrics must not",
        )
    fleet_read = not any(
        problem.startswith((variable("fleet_tick"), variable("lease_seconds")))
        for problem in problems
    )
    if fleet_read and settings.lease_seconds < settings.heartbeat_stale_after:
        reader.problem(
            "lease_seconds",
            f"{settings.lease_seconds} is shorter than {STALE_TICKS} fleet ticks "
            f"({variable('fleet_tick')} {settings.fleet_tick:g}): the database would end the "
            "lock session of a replica the fleet still counts live; at least "
            f"{math.ceil(settings.heartbeat_stale_after)}",
        )
    if settings.ca_bundle is not None and not Path(settings.ca_bundle).is_file():
        reader.problem("ca_bundle", f"{settings.ca_bundle} is not a file")
    if problems:
        raise ConfigurationError("\n".join(problems))
    return replace(settings, warnings=tuple(warnings))

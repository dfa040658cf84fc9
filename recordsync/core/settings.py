"""One frozen settings object, built and checked once at start-up (the operators' contract).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TypeVar

from recordsync.core.database_url import check_sqlite_folder, parse_database_url
from recordsync.core.errors import ConfigurationError, InvalidRecordError
from recordsync.core.secret import Secret, SecretSource, secret_from_file_bytes
from recordsync.core.times import parse_time

PREFIX = "RECORDSYNC_"
DEFAULT_DATABASE_URL = "sqlite:///recordsync.db"
DEFAULT_HTTP_PORT = 9108
DEFAULT_SECRET_OVERLAP = 86400.0  # seconds a rotated-out secret is still accepted
DEFAULT_EVENTS_HOST = "0.0.0.0"  # noqa: S104 - like /metrics: the ingress reaches the pod
DEFAULT_EVENT_GRACE = 600.0  # seconds an announced round may take to reach the warehouse
# The keys of one merchant: single-merchant variables, or the keys of a [[merchants]] entry.
MERCHANT_KEYS: Final = (
    "merchant_id",
    "secret",
    "secret_file",
    "previous_secret",
    "previous_secret_file",
    "base_url",
    "history_from",
)
# The keys naming a merchant's secrets: with [[merchants]], they belong in the entries.
_SECRET_KEYS: Final = ("secret", "secret_file", "previous_secret", "previous_secret_file")

T = TypeVar("T")


# The adaptive tail's defaults (the rules: ``sync.tail_pace``).
# The ceiling of an idle tail while a snapshot runs, without notifications: the freshness a
# backfill may cost when the stream is quiet (a change after a quiet spell waits at most this
# long), against 0.1 of the default budget kept by the tail at most.
DEFAULT_POLL_CEILING: Final = 10.0
# With notifications, the idle tail's safety poll: what no notification announces (a later
# revision of an ended round; a notification the platform gave up on) arrives within it.
# 10 s costs an idle merchant 0.1 request a second, a twentieth of the default budget.
DEFAULT_SAFETY_POLL: Final = 10.0
# With notifications, during a snapshot, the tail reads at most once every this many seconds,
# polls and wake-ups alike: at the default limit of 2 requests a second the snapshot keeps
# 0.95 of the budget, and a round's end reaches the warehouse within it and a round trip.
# 5 s (0.9 of the budget) was tried first and measured 0.902 of the requests and 0.840 of
# the ceiling for a whole process (``bench/budget_share.py``): on the edge of 0.9 and under
# 0.85, because a daemon's start (about 4 s) and its budget's margin cost the rest.
DEFAULT_SNAPSHOT_TAIL_INTERVAL: Final = 10.0


@dataclass(frozen=True, slots=True)
class MerchantSettings:
    """One merchant this deployment syncs, with the defaults already applied.

    ``secret`` and ``base_url`` are None only when the command needs no platform (``status``,
    ``report``): those commands may run where the secrets are not mounted.
    ``previous_secret`` is the secret of before a rotation still inside its overlap, named by
    the operator so that a replica started during the overlap verifies callbacks signed with
    it (spec: Authentication, Key rotation); requests are always signed with ``secret``.
    """

    merchant_id: str
    secret: SecretSource | None = field(default=None, repr=False)
    base_url: str | None = None
    history_from: datetime | None = None
    previous_secret: SecretSource | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Settings:
    merchants: tuple[MerchantSettings, ...] = ()
    database_url: str = DEFAULT_DATABASE_URL
    http_port: int = DEFAULT_HTTP_PORT
    poll_interval: float = 1.0
    # The adaptive tail (``sync.tail_pace``): an idle tail's longest wait while a
    # snapshot runs, its safety poll when notifications are received, and with notifications
    # the least time between its reads during a snapshot.
    poll_ceiling: float = DEFAULT_POLL_CEILING
    safety_poll: float = DEFAULT_SAFETY_POLL
    snapshot_tail_interval: float = DEFAULT_SNAPSHOT_TAIL_INTERVAL
    page_size: int = 1000
    snapshot_concurrency: int = 4
    http_timeout: float = 30.0
    # One-shot commands (backfill, verify): how long a platform that cannot be reached is
    # tried again before the command ends naming the cause; the daemon keeps trying.
    unreachable_timeout: float = 60.0
    drift_check_interval: float = 3600.0  # seconds; 0 turns the drift check off
    catalogue_interval: float = 3600.0  # seconds between game catalogue passes; 0: off
    ready_multiple: float = 30.0  # /readyz: a commit within this many poll intervals
    keep_revisions: bool = True  # append every revision seen to record_revisions
    # Days a superseded revision stays in record_revisions; 0 keeps every revision.
    revision_retention: float = 0.0
    db_pool_size: int = 0  # warehouse connections per process; 0: sized from what it runs
    rate_margin: float = 0.05  # seconds added to the budget's window against arrival jitter
    secret_overlap: float = DEFAULT_SECRET_OVERLAP
    # Round-end notifications: their own port (0: off), apart from /metrics.
    events_port: int = 0
    events_host: str = DEFAULT_EVENTS_HOST
    event_grace: float = DEFAULT_EVENT_GRACE
    tls_verify: bool = True
    ca_bundle: str | None = None
    log_level: str = "info"
    log_format: str | None = None  # "json", "console", or None: decide by whether stdout is a TTY
    warnings: tuple[str, ...] = ()

    def merchant(self, merchant_id: str | None = None) -> MerchantSettings:
        """The only merchant, or the one named; otherwise an error naming the choices."""
        configured = ", ".join(merchant.merchant_id for merchant in self.merchants)
        if merchant_id is None:
            if len(self.merchants) == 1:
                return self.merchants[0]
            if not self.merchants:
                raise ConfigurationError(
                    "no merchant is configured: set RECORDSYNC_MERCHANT_ID or add "
                    "[[merchants]] to the --config file"
                )
            raise ConfigurationError(
                f"several merchants are configured ({configured}): name one with --merchant"
            )
        for merchant in self.merchants:
            if merchant.merchant_id == merchant_id:
                return merchant
        raise ConfigurationError(
            f"merchant {merchant_id!r} is not configured; configured: {configured or 'none'}"
        )

    @property
    def verify(self) -> bool | str:
        """What httpx's ``verify`` takes: a CA bundle path wins over the boolean."""
        return self.ca_bundle or self.tls_verify

    @property
    def idle_commit_interval(self) -> float:
        """Seconds an idle tail may go without committing (``SyncOptions``): ten polls, and at
        most a third of the readiness limit, so that readiness never sees an idle tail as
        stuck."""
        return min(10 * self.poll_interval, self.ready_multiple * self.poll_interval / 3)

    @property
    def longest_tail_wait(self) -> float:
        """The longest an idle tail waits between two reads (``sync.tail_pace``)."""
        waits = [self.poll_interval, self.poll_ceiling, self.snapshot_tail_interval]
        if self.events_port:
            waits.append(self.safety_poll)
        return max(waits)

    @property
    def readiness_multiple(self) -> float:
        """``ready_multiple``, raised when the adaptive tail may wait longer: an idle tail
        commits at its first read after ``idle_commit_interval``, so two commits may be that
        and its longest wait apart; readiness allows twice that, so that a tail stretched to
        its ceiling is never taken for a stuck one."""
        needed = 2 * (self.idle_commit_interval + self.longest_tail_wait) / self.poll_interval
        return max(self.ready_multiple, needed)


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
        return PREFIX + key.upper()

    def either(self, first: str, second: str) -> str:
        return f"{self.name(first)} or {self.name(second)}"

    def origin(self, key: str) -> str:
        """Where ``key``'s value came from, for a conflict between two places."""
        if self.environ.get(PREFIX + key.upper()):
            return PREFIX + key.upper()
        return f"the top-level {key} in --config"

    def problem(self, key: str, message: str) -> None:
        self.problems.append(f"{self.name(key)}: {message}")

    def raw(self, key: str) -> str | None:
        env_value = self.environ.get(PREFIX + key.upper())
        if env_value is not None and env_value != "":
            return env_value
        return _text(self.file_values.get(key))

    def get(self, key: str, parse: Callable[[str], T], default: T, *, hint: str) -> T:
        value = self.raw(key)
        if value is None:
            return default
        try:
            return parse(value)
        except (ValueError, InvalidRecordError):
            self.problem(key, f"{value[:60]!r} is not {hint}")
            return default

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


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _port(value: str) -> int:
    number = int(value)
    if not 0 <= number <= 65535:  # noqa: PLR2004 - the TCP port range
        raise ValueError(value)
    return number


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError(value)
    return number


def _positive_seconds(value: str) -> float:
    """A wait: positive and finite (an infinite one would never read again)."""
    number = _positive_float(value)
    if math.isinf(number):
        raise ValueError(value)
    return number


def _non_negative_float(value: str) -> float:
    number = float(value)
    if not number >= 0:
        raise ValueError(value)
    return number


def _boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError(value)


def _time(value: str) -> datetime:
    return parse_time(value, field="history_from")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in allowed:
            raise ValueError(value)
        return lowered

    return parse


@dataclass(frozen=True, slots=True)
class Kind:
    """How a setting's text is read, and what the error line says it should have been."""

    parse: Callable[[str], Any]
    hint: str


_SECONDS = Kind(_positive_float, "a positive number of seconds")
_WAIT = Kind(_positive_seconds, "a positive number of seconds")  # finite, too
_SECONDS_OR_OFF = Kind(_non_negative_float, "seconds (0 turns it off)")
_SECONDS_OR_NONE = Kind(_non_negative_float, "seconds (>= 0)")
_COUNT = Kind(_positive_int, "a positive integer")
_POSITIVE = Kind(_positive_float, "a positive number")
_BOOLEAN = Kind(_boolean, "true or false")
_TEXT = Kind(str, "text")

# Every setting but the merchants and the warehouse URL (read apart: checked, never quoted
# back), with how it is read; its default is the ``Settings`` field's, declared once there.
SETTING_KINDS: Final[Mapping[str, Kind]] = {
    "http_port": Kind(_port, "a port 0-65535"),
    "poll_interval": _SECONDS,
    "poll_ceiling": _WAIT,
    "safety_poll": _WAIT,
    "snapshot_tail_interval": _WAIT,
    "page_size": _COUNT,
    "snapshot_concurrency": _COUNT,
    "http_timeout": _SECONDS,
    "unreachable_timeout": _SECONDS,
    "drift_check_interval": _SECONDS_OR_OFF,
    "catalogue_interval": _SECONDS_OR_OFF,
    "ready_multiple": _POSITIVE,
    "keep_revisions": _BOOLEAN,
    "revision_retention": Kind(_non_negative_float, "days (0 keeps every revision)"),
    "db_pool_size": Kind(_non_negative_int, "a whole number of connections (0: sized for you)"),
    "rate_margin": _SECONDS_OR_NONE,
    "secret_overlap": _SECONDS_OR_NONE,
    "events_port": Kind(_port, "a port 0-65535 (0: off)"),
    "events_host": _TEXT,
    "event_grace": _SECONDS,
    "tls_verify": _BOOLEAN,
    "ca_bundle": _TEXT,
    "log_level": Kind(
        _choice("debug", "info", "warning", "error"), "one of debug, info, warning, error"
    ),
    "log_format": Kind(_choice("json", "console"), "json or console"),
}
_DEFAULTS: Final[Mapping[str, Any]] = {item.name: item.default for item in fields(Settings)}


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
    if value is not None and not (value.isascii() and value.isprintable()):
        reader.problem("merchant_id", f"{value[:60]!r} is not printable ASCII (a header value)")
        return None
    return value


def _base_url(reader: _Reader, value: str) -> str | None:
    if not value.startswith(("http://", "https://")):
        reader.problem("base_url", f"{value[:60]!r} is not an http(s) URL")
        return None
    return value.rstrip("/")


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
        base_url = None if url is None else _base_url(reader, url)
        secret = _secret_source(reader)
        previous = _secret_source(reader, previous=True)
    merchant_id = _merchant_id(reader)
    history_from = reader.get("history_from", _time, None, hint="an RFC3339 time")
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
            base_url = _base_url(entry_reader, own_url)
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
    history_from = entry_reader.get(
        "history_from", _time, defaults.history_from, hint="an RFC3339 time"
    )
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
    default_url = reader.raw("base_url") if need_platform else None
    defaults = _Defaults(
        base_url=None if default_url is None else _base_url(reader, default_url),
        base_url_given=default_url is not None,
        history_from=reader.get("history_from", _time, None, hint="an RFC3339 time"),
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
    false only for ``migrate``: no merchant is read at all.
    """
    environ = os.environ if environ is None else environ
    env_config = environ.get(PREFIX + "CONFIG")
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

    values = {
        key: reader.get(key, kind.parse, _DEFAULTS[key], hint=kind.hint)
        for key, kind in SETTING_KINDS.items()
    }
    settings = Settings(merchants=merchants, database_url=_database_url(reader), **values)
    if settings.page_size > 1000:  # noqa: PLR2004 - the spec's page-size ceiling
        reader.problem("page_size", f"{settings.page_size} is above 1000")
    if settings.events_port and settings.events_port == settings.http_port:
        reader.problem(
            "events_port",
            f"{settings.events_port} is RECORDSYNC_HTTP_PORT too: the events port faces the "
            "platform, /metrics must not",
        )
    if settings.ca_bundle is not None and not Path(settings.ca_bundle).is_file():
        reader.problem("ca_bundle", f"{settings.ca_bundle} is not a file")
    if problems:
        raise ConfigurationError("\n".join(problems))
    return replace(settings, warnings=tuple(warnings))

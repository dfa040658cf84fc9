"""One frozen settings object, built and checked once at start-up (the operators' contract).

Sources, strongest first: the environment (``RECORDSYNC_*``), then an optional TOML file
(``--config PATH``) with the same keys in lower case without the prefix, then defaults.
Every problem is collected and reported at once, one line per variable, so an operator fixes
the whole configuration in one pass; the CLI turns ``ConfigurationError`` into exit code 2.
Modules receive this object; none of them reads the environment.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from recordsync.core.database_url import parse_database_url
from recordsync.core.errors import ConfigurationError, InvalidRecordError
from recordsync.core.secret import Secret
from recordsync.core.times import parse_time

PREFIX = "RECORDSYNC_"
DEFAULT_DATABASE_URL = "sqlite:///recordsync.db"
DEFAULT_HTTP_PORT = 9108

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Settings:
    base_url: str | None
    merchant_id: str | None
    secret: Secret | None = field(repr=False)
    database_url: str = DEFAULT_DATABASE_URL
    history_from: datetime | None = None
    http_port: int = DEFAULT_HTTP_PORT
    poll_interval: float = 1.0
    page_size: int = 1000
    snapshot_concurrency: int = 4
    http_timeout: float = 30.0
    drift_check_interval: float = 3600.0  # seconds; 0 turns the drift check off
    ready_multiple: float = 30.0  # /readyz: a commit within this many poll intervals
    keep_revisions: bool = True  # append every revision seen to record_revisions
    rate_margin: float = 0.05  # seconds added to the budget's window against arrival jitter
    tls_verify: bool = True
    ca_bundle: str | None = None
    log_level: str = "info"
    log_format: str | None = None  # "json", "console", or None: decide by whether stdout is a TTY
    warnings: tuple[str, ...] = ()

    def platform(self) -> tuple[str, str, Secret]:
        """The three values every platform call needs; checked present at load time."""
        if self.base_url is None or self.merchant_id is None or self.secret is None:
            raise ConfigurationError("the platform settings were not loaded for this command")
        return self.base_url, self.merchant_id, self.secret

    @property
    def verify(self) -> bool | str:
        """What httpx's ``verify`` takes: a CA bundle path wins over the boolean."""
        return self.ca_bundle or self.tls_verify


class _Reader:
    """Looks a key up in the environment, then the file; collects problems instead of raising."""

    def __init__(self, environ: Mapping[str, str], file_values: Mapping[str, Any]) -> None:
        self.environ = environ
        self.file_values = file_values
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def raw(self, key: str) -> str | None:
        env_value = self.environ.get(PREFIX + key.upper())
        if env_value is not None and env_value != "":
            return env_value
        file_value = self.file_values.get(key)
        if file_value is None:
            return None
        return str(file_value).lower() if isinstance(file_value, bool) else str(file_value)

    def get(self, key: str, parse: Callable[[str], T], default: T, *, hint: str) -> T:
        value = self.raw(key)
        if value is None:
            return default
        try:
            return parse(value)
        except (ValueError, InvalidRecordError):
            self.problems.append(f"{PREFIX}{key.upper()}: {value[:60]!r} is not {hint}")
            return default

    def required(self, key: str, *, what: str) -> str | None:
        value = self.raw(key)
        if value is None:
            self.problems.append(f"{PREFIX}{key.upper()}: required ({what})")
        return value


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


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
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


def _database_url(reader: _Reader) -> str:
    """The warehouse URL, checked now so that a bad one is reported with every other problem
    (never quoted back: it may hold a password)."""
    url = reader.raw("database_url") or DEFAULT_DATABASE_URL
    try:
        parse_database_url(url)
    except ConfigurationError as exc:
        reader.problems.append(f"{PREFIX}DATABASE_URL: {exc}")
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


def _read_secret(reader: _Reader) -> Secret | None:
    inline = reader.raw("secret")
    secret_file = reader.raw("secret_file")
    if inline is not None and secret_file is not None:
        reader.problems.append(
            f"{PREFIX}SECRET and {PREFIX}SECRET_FILE are both set: keep one of them"
        )
        return None
    if inline is not None:
        return Secret(inline)
    if secret_file is None:
        reader.problems.append(
            f"{PREFIX}SECRET or {PREFIX}SECRET_FILE: one is required (the platform secret)"
        )
        return None
    path = Path(secret_file)
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        reader.problems.append(f"{PREFIX}SECRET_FILE: cannot read {path} ({exc.strerror})")
        return None
    # Group-readable is how a non-root container reads a mounted secret (root-owned, 0440,
    # the pod's fsGroup), so only a world-readable file is worth a warning.
    if mode & stat.S_IROTH:
        reader.warnings.append(
            f"{PREFIX}SECRET_FILE: {path} is readable by every user; chmod o-r it"
        )
    value = text.removesuffix("\n").removesuffix("\r")
    if not value:
        reader.problems.append(f"{PREFIX}SECRET_FILE: {path} is empty")
        return None
    return Secret(value)


def load_settings(
    environ: Mapping[str, str] | None = None,
    *,
    config_path: Path | None = None,
    need_platform: bool = True,
    need_merchant: bool = True,
) -> Settings:
    """Build the settings or raise ``ConfigurationError`` listing every problem, one per line.

    ``need_platform`` is false for commands that only touch the warehouse (``migrate``);
    ``need_merchant`` is false only for ``migrate``.
    """
    environ = os.environ if environ is None else environ
    env_config = environ.get(PREFIX + "CONFIG")
    if config_path is None and env_config:
        config_path = Path(env_config)
    reader = _Reader(environ, _read_config_file(config_path))

    base_url = merchant_id = None
    secret = None
    if need_platform:
        base_url = reader.required("base_url", what="the platform base URL, e.g. https://host")
        if base_url is not None and not base_url.startswith(("http://", "https://")):
            reader.problems.append(f"{PREFIX}BASE_URL: {base_url[:60]!r} is not an http(s) URL")
        secret = _read_secret(reader)
    if need_merchant:
        merchant_id = reader.required("merchant_id", what="sent as X-Merchant-Id")

    settings = Settings(
        base_url=base_url.rstrip("/") if base_url else None,
        merchant_id=merchant_id,
        secret=secret,
        database_url=_database_url(reader),
        history_from=reader.get("history_from", _time, None, hint="an RFC3339 time"),
        http_port=reader.get("http_port", _port, DEFAULT_HTTP_PORT, hint="a port 0-65535"),
        poll_interval=reader.get(
            "poll_interval", _positive_float, 1.0, hint="a positive number of seconds"
        ),
        page_size=reader.get("page_size", _positive_int, 1000, hint="a positive integer"),
        snapshot_concurrency=reader.get(
            "snapshot_concurrency", _positive_int, 4, hint="a positive integer"
        ),
        http_timeout=reader.get(
            "http_timeout", _positive_float, 30.0, hint="a positive number of seconds"
        ),
        drift_check_interval=reader.get(
            "drift_check_interval", _non_negative_float, 3600.0, hint="seconds (0 turns it off)"
        ),
        ready_multiple=reader.get(
            "ready_multiple", _positive_float, 30.0, hint="a positive number"
        ),
        rate_margin=reader.get("rate_margin", _non_negative_float, 0.05, hint="seconds (>= 0)"),
        keep_revisions=reader.get("keep_revisions", _boolean, default=True, hint="true or false"),
        tls_verify=reader.get("tls_verify", _boolean, default=True, hint="true or false"),
        ca_bundle=reader.raw("ca_bundle"),
        log_level=reader.get(
            "log_level",
            _choice("debug", "info", "warning", "error"),
            "info",
            hint="one of debug, info, warning, error",
        ),
        log_format=reader.get(
            "log_format", _choice("json", "console"), None, hint="json or console"
        ),
        warnings=(),
    )
    if settings.page_size > 1000:  # noqa: PLR2004 - the spec's page-size ceiling
        reader.problems.append(f"{PREFIX}PAGE_SIZE: {settings.page_size} is above 1000")
    if settings.ca_bundle is not None and not Path(settings.ca_bundle).is_file():
        reader.problems.append(f"{PREFIX}CA_BUNDLE: {settings.ca_bundle} is not a file")
    if reader.problems:
        raise ConfigurationError("\n".join(reader.problems))
    return replace(settings, warnings=tuple(reader.warnings))

"""One frozen settings object, built and checked once at start-up (the operators' contract).

Three modules: ``keys`` declares every setting once (the ``Settings`` fields: key, kind and
default), ``validators`` says how each kind of text is read and what its error line asks
for, and ``loading`` reads the environment and the ``--config`` file into a ``Settings``,
reporting every problem at once.
"""

from recordsync.core.settings.keys import (
    DEFAULT_DATABASE_URL,
    DEFAULT_EVENT_GRACE,
    DEFAULT_EVENTS_HOST,
    DEFAULT_FLEET_TICK,
    DEFAULT_HTTP_PORT,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_POLL_CEILING,
    DEFAULT_SAFETY_POLL,
    DEFAULT_SECRET_OVERLAP,
    DEFAULT_SNAPSHOT_TAIL_INTERVAL,
    MERCHANT_KEYS,
    PREFIX,
    SETTING_KINDS,
    STALE_TICKS,
    MerchantSettings,
    Settings,
)
from recordsync.core.settings.loading import load_settings

__all__ = [
    "DEFAULT_DATABASE_URL",
    "DEFAULT_EVENTS_HOST",
    "DEFAULT_EVENT_GRACE",
    "DEFAULT_FLEET_TICK",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_POLL_CEILING",
    "DEFAULT_SAFETY_POLL",
    "DEFAULT_SECRET_OVERLAP",
    "DEFAULT_SNAPSHOT_TAIL_INTERVAL",
    "MERCHANT_KEYS",
    "PREFIX",
    "SETTING_KINDS",
    "STALE_TICKS",
    "MerchantSettings",
    "Settings",
    "load_settings",
]

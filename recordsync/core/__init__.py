"""The core: the values and rules every layer shares, with no I/O of its own.

Records, pages and capabilities as typed values (``models``), exact money (``money``), platform
time (``times``), the sync's persistent state (``state``), the one exception hierarchy
(``errors``), the secret and where it comes from (``secret``), the frozen settings with their
merchants (``settings``) and the process's cooperative stop (``stopping``, ``early_signals``).
It imports nothing else of recordsync.
"""

from recordsync.core.errors import (
    AuthenticationError,
    ClockSkewError,
    ConfigurationError,
    CursorExpiredError,
    FatalPlatformError,
    InvalidRecordError,
    LeaseSupersededError,
    PlatformError,
    ProjectionLagError,
    ProtocolError,
    RateLimitedError,
    RecordSyncError,
    RequestRejectedError,
    RetryableError,
    ServerError,
    ShutdownRequestedError,
    TransportError,
    UnexpectedRedirectError,
    WarehouseUnavailableError,
)
from recordsync.core.models import (
    DEFAULT_LIMITS,
    Capabilities,
    ChangesPage,
    Currency,
    Limits,
    Record,
    RecordChange,
    RecordsPage,
    RejectedItem,
)
from recordsync.core.secret import Secret, SecretProvider, SecretSource
from recordsync.core.state import (
    REBUILD_JOB,
    Phase,
    SyncState,
    Window,
    WindowProgress,
)
from recordsync.core.stopping import Stopper

__all__ = [
    "DEFAULT_LIMITS",
    "REBUILD_JOB",
    "AuthenticationError",
    "Capabilities",
    "ChangesPage",
    "ClockSkewError",
    "ConfigurationError",
    "Currency",
    "CursorExpiredError",
    "FatalPlatformError",
    "InvalidRecordError",
    "LeaseSupersededError",
    "Limits",
    "Phase",
    "PlatformError",
    "ProjectionLagError",
    "ProtocolError",
    "RateLimitedError",
    "Record",
    "RecordChange",
    "RecordSyncError",
    "RecordsPage",
    "RejectedItem",
    "RequestRejectedError",
    "RetryableError",
    "Secret",
    "SecretProvider",
    "SecretSource",
    "ServerError",
    "ShutdownRequestedError",
    "Stopper",
    "SyncState",
    "TransportError",
    "UnexpectedRedirectError",
    "WarehouseUnavailableError",
    "Window",
    "WindowProgress",
]

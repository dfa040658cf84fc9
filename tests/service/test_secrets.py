"""The secret keeper: rotated secret files are seen (in place and by Kubernetes' symlink swap),
the previous secret is accepted until the overlap ends, a broken file keeps the last good
secret, and no secret value ever reaches a log line or an error."""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs
from support.clocks import FakeClock

from recordsync.core.errors import ConfigurationError
from recordsync.core.secret import Secret, SecretSource
from recordsync.platform.budget import RateBudget
from recordsync.platform.client import PlatformClient
from recordsync.service.secrets import SecretKeeper

OLD = "old-secret-0123456789abcdefghijklmnopqrstuv"
NEW = "new-secret-0123456789abcdefghijklmnopqrstuv"
# Differs from OLD nearly everywhere: a file rewritten in place holds a mix of the two.
ROTATED = "rotated-secret-ZYXWVUTSRQPONMLKJIHGFEDCBA98"
MERCHANT = "brand-a"


def write_secret(path: Path, value: str) -> None:
    path.write_text(value + "\n", encoding="utf-8")
    path.chmod(0o600)


def keeper_of(path: Path, **options) -> SecretKeeper:
    return SecretKeeper({MERCHANT: SecretSource.file(path)}, **options)


# -- how a rotation arrives ------------------------------------------------------------------


def rewrite_in_place(directory: Path) -> tuple[Path, Callable[[], None]]:
    """An operator's ``echo new > secret``: same inode, and here even the same mtime."""
    path = directory / "secret"
    write_secret(path, OLD)

    def rotate() -> None:
        before = path.stat()
        with path.open("r+", encoding="utf-8") as handle:
            handle.write(NEW + "\n")
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    return path, rotate


def kubernetes_swap(directory: Path) -> tuple[Path, Callable[[], None]]:
    """A Kubernetes secret volume: ``secret -> ..data/secret``, ``..data -> ..<timestamp>``;
    a rotation writes a new timestamped directory and swaps ``..data`` atomically."""
    first = directory / "..2026_01_01_00_00_00.1"
    first.mkdir()
    write_secret(first / "secret", OLD)
    (directory / "..data").symlink_to(first.name)
    path = directory / "secret"
    path.symlink_to(Path("..data") / "secret")

    def rotate() -> None:
        second = directory / "..2026_01_01_00_05_00.2"
        second.mkdir()
        write_secret(second / "secret", NEW)
        os.utime(second / "secret", ns=((first / "secret").stat().st_mtime_ns,) * 2)
        (directory / "..data_tmp").symlink_to(second.name)
        (directory / "..data_tmp").replace(directory / "..data")  # os.replace: atomic
        (first / "secret").unlink()
        first.rmdir()

    return path, rotate


ROTATIONS = [rewrite_in_place, kubernetes_swap]
ROTATION_IDS = ["rewritten-in-place", "kubernetes-data-symlink-swap"]


@pytest.mark.parametrize("layout", ROTATIONS, ids=ROTATION_IDS)
def test_refresh_picks_up_a_rotated_secret_file(tmp_path, layout):
    path, rotate = layout(tmp_path)
    keeper = keeper_of(path)
    assert keeper.current(MERCHANT) == Secret(OLD)
    assert keeper.refresh() == ()  # nothing changed yet
    rotate()
    with capture_logs() as logs:
        assert keeper.refresh() == (MERCHANT,)
    assert keeper.current(MERCHANT) == Secret(NEW)
    assert keeper.provider(MERCHANT).current() == Secret(NEW)
    assert [log["event"] for log in logs] == ["secret_rotated"]
    assert logs[0]["merchant_id"] == MERCHANT
    assert keeper.refresh() == ()  # the same content again is no rotation


def test_a_client_signs_with_the_rotated_secret_within_10_seconds(tmp_path):
    """A real watcher thread, a real client; only the HTTP transport is a stand-in."""
    path, rotate = kubernetes_swap(tmp_path)
    signed_with: list[str] = []  # per request: the secret its signature verifies with

    def platform(request: httpx.Request) -> httpx.Response:
        message = f"{request.headers['X-Timestamp']}\nGET\n{request.url.raw_path.decode()}\n\n\n"
        verifies = [
            name
            for name, secret in (("old", OLD), ("new", NEW))
            if hmac.compare_digest(
                hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest(),
                request.headers["X-Signature"],
            )
        ]
        signed_with.append(verifies[0] if len(verifies) == 1 else "neither")
        capabilities = {
            "wallet_mode": "TRANSFER",
            "currencies": [{"code": "USD", "decimal_scale": 2}],
            "limits": {"record_requests": 5, "record_seconds": 1, "max_page_size": 1000},
        }
        return httpx.Response(200, json={"data": capabilities, "request_id": "r"})

    keeper = keeper_of(path, interval=0.05)
    client = PlatformClient(
        base_url="https://platform.example",
        merchant_id=MERCHANT,
        secret=keeper.provider(MERCHANT),
        budget=RateBudget(100, 1),
        transport=httpx.MockTransport(platform),
    )
    with keeper, client:
        client.capabilities()
        rotate()
        rotated_at = time.monotonic()
        while signed_with[-1] != "new" and time.monotonic() - rotated_at < 10:
            time.sleep(0.02)
            client.capabilities()
    assert signed_with[0] == "old"
    assert signed_with[-1] == "new"
    assert "neither" not in signed_with
    assert time.monotonic() - rotated_at < 10


def test_the_previous_secret_is_accepted_until_the_overlap_ends(tmp_path):
    path, rotate = rewrite_in_place(tmp_path)
    clock = FakeClock(1000.0)
    keeper = keeper_of(path, overlap=3600.0, clock=clock)
    assert keeper.accepted(MERCHANT) == (Secret(OLD),)
    rotate()
    keeper.refresh()
    clock.now += 3599.0
    assert keeper.accepted(MERCHANT) == (Secret(NEW), Secret(OLD))
    clock.now += 1.0
    assert keeper.accepted(MERCHANT) == (Secret(NEW),)
    clock.now -= 10.0  # dropped for good, not hidden
    assert keeper.accepted(MERCHANT) == (Secret(NEW),)


def test_without_an_overlap_only_the_current_secret_is_accepted(tmp_path):
    path, rotate = rewrite_in_place(tmp_path)
    keeper = keeper_of(path, overlap=0.0, clock=FakeClock(1000.0))
    rotate()
    keeper.refresh()
    assert keeper.accepted(MERCHANT) == (Secret(NEW),)


def delete(path: Path) -> None:
    path.unlink()


def empty(path: Path) -> None:
    path.write_text("\n", encoding="utf-8")


def replace_by_a_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def garble(path: Path) -> None:
    path.write_bytes(b"\xff\xfe" + NEW.encode())


def half_written(path: Path) -> None:
    path.write_text(NEW[:20], encoding="utf-8")


def inner_whitespace(path: Path) -> None:
    path.write_text(NEW[:20] + " " + NEW[21:] + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    "break_it",
    [delete, empty, replace_by_a_directory, garble, half_written, inner_whitespace],
    ids=["deleted", "empty", "a-directory", "not-utf-8", "half-written", "inner-whitespace"],
)
def test_a_broken_file_keeps_the_last_good_secret_and_is_logged_once(tmp_path, break_it):
    path = tmp_path / "secret"
    write_secret(path, OLD)
    keeper = keeper_of(path)
    break_it(path)
    with capture_logs() as logs:
        for _ in range(3):
            assert keeper.refresh() == ()
            assert keeper.current(MERCHANT) == Secret(OLD)
    assert [log["event"] for log in logs] == ["secret_file_unreadable"]
    assert logs[0]["merchant_id"] == MERCHANT
    assert logs[0]["path"] == str(path)
    if path.is_dir():
        path.rmdir()
    write_secret(path, NEW)
    with capture_logs() as logs:
        assert keeper.refresh() == (MERCHANT,)
        keeper.refresh()
    assert [log["event"] for log in logs] == ["secret_file_readable_again", "secret_rotated"]
    assert keeper.current(MERCHANT) == Secret(NEW)


def test_no_secret_value_reaches_logs_reprs_or_errors(tmp_path):
    path, rotate = rewrite_in_place(tmp_path)
    keeper = keeper_of(path, clock=FakeClock(1000.0))
    with capture_logs() as logs:
        rotate()
        keeper.refresh()
        garble(path)  # a decoding error's own message would quote a byte of the content
        keeper.refresh()
        empty(path)
        keeper.refresh()
    shown = repr(logs) + repr(keeper) + repr(keeper.provider(MERCHANT))
    shown += repr(keeper.accepted(MERCHANT))
    with pytest.raises(ConfigurationError) as unknown:
        keeper.current("brand-z")
    garble(path)
    with pytest.raises(ConfigurationError) as unreadable:
        keeper_of(path)
    shown += str(unknown.value) + str(unreadable.value)
    assert "not UTF-8" in str(unreadable.value)
    for value in (OLD, NEW, "\\xff"):
        assert value not in shown


def test_inline_secrets_are_kept_and_never_reread(tmp_path):
    keeper = SecretKeeper({MERCHANT: SecretSource.given(Secret(OLD))})
    assert keeper.refresh() == ()
    assert keeper.current(MERCHANT) == Secret(OLD)


def test_a_provider_for_an_unknown_merchant_fails_at_once(tmp_path):
    keeper = SecretKeeper({MERCHANT: SecretSource.given(Secret(OLD))})
    with pytest.raises(ConfigurationError, match="brand-z"):
        keeper.provider("brand-z")


def test_the_watcher_starts_and_stops_safely_twice(tmp_path):
    path, rotate = rewrite_in_place(tmp_path)
    keeper = keeper_of(path, interval=0.01)
    keeper.stop()  # before start: nothing to stop
    keeper.start()
    keeper.start()
    rotate()
    deadline = time.monotonic() + 5
    while keeper.current(MERCHANT) != Secret(NEW) and time.monotonic() < deadline:
        time.sleep(0.01)
    keeper.stop()
    keeper.stop()
    assert keeper.current(MERCHANT) == Secret(NEW)
    assert not any(thread.name == "secret-keeper" for thread in threading.enumerate())


# -- a file caught while it is being rewritten -----------------------------------


class ChunkedRewrite:
    """Rewrites the secret file in place, ``size`` bytes per step, without truncating it: in
    between, the file holds the start of the new secret and the end of the old one, exactly
    43 characters.  Used as the keeper's sleep, it writes one step while the keeper waits."""

    def __init__(self, path: Path, new: str, size: int = 3) -> None:
        self.path = path
        self.data = (new + "\n").encode()
        self.size = size
        self.written = 0

    @property
    def done(self) -> bool:
        return self.written >= len(self.data)

    def step(self, _seconds: float = 0.0) -> None:
        if self.done:
            return
        with self.path.open("r+b") as handle:
            handle.seek(self.written)
            handle.write(self.data[self.written : self.written + self.size])
            handle.flush()
        self.written += self.size


def test_a_file_rewritten_in_place_is_taken_only_once_two_reads_agree(tmp_path):
    path = tmp_path / "secret"
    write_secret(path, OLD)
    writer = ChunkedRewrite(path, ROTATED)
    armed = False

    def sleep(seconds: float) -> None:  # the keeper's wait between its two reads
        if armed:
            writer.step(seconds)

    keeper = keeper_of(path, overlap=60.0, clock=FakeClock(1000.0), sleep=sleep)
    armed = True
    with capture_logs() as logs:
        while not writer.done:
            writer.step()
            keeper.refresh()
            if not writer.done:  # a mix of both secrets: the old one stays, alone
                assert keeper.current(MERCHANT) == Secret(OLD)
                assert keeper.accepted(MERCHANT) == (Secret(OLD),)
        keeper.refresh()  # the file is still now
    assert keeper.current(MERCHANT) == Secret(ROTATED)
    assert keeper.accepted(MERCHANT) == (Secret(ROTATED), Secret(OLD))
    assert [log["event"] for log in logs] == ["secret_file_changing", "secret_rotated"]
    assert logs[0]["log_level"] == "warning"


def slow_truncating_writer(path: Path, new: str) -> threading.Thread:
    """An operator's slow ``cat new > secret``: truncate, then two bytes at a time, flushed."""

    def write() -> None:
        data = (new + "\n").encode()
        with path.open("wb") as handle:
            for start in range(0, len(data), 2):
                handle.write(data[start : start + 2])
                handle.flush()
                time.sleep(0.001)  # the slow writer itself, not a synchronisation

    return threading.Thread(target=write, name="slow-secret-writer")


def test_a_partial_secret_is_never_taken_nor_the_previous_one_dropped(tmp_path):
    """A real writer thread against a keeper refreshing as fast as it can, its two reads only
    a millisecond apart: every partial file it sees must be refused by its form."""
    path = tmp_path / "secret"
    write_secret(path, OLD)
    keeper = keeper_of(path, overlap=60.0, settle=0.001, clock=FakeClock(1000.0))
    seen: set[Secret] = set()
    writer = slow_truncating_writer(path, NEW)
    writer.start()
    while writer.is_alive():
        keeper.refresh()
        seen.update(keeper.accepted(MERCHANT))
    writer.join()
    deadline = time.monotonic() + 5
    while keeper.current(MERCHANT) != Secret(NEW) and time.monotonic() < deadline:
        keeper.refresh()
    seen.update(keeper.accepted(MERCHANT))
    assert seen <= {Secret(OLD), Secret(NEW)}  # no partial secret, ever
    assert keeper.current(MERCHANT) == Secret(NEW)
    assert keeper.accepted(MERCHANT) == (Secret(NEW), Secret(OLD))


def test_a_file_changing_while_the_keeper_starts_is_refused(tmp_path):
    path = tmp_path / "secret"
    write_secret(path, OLD)
    writer = ChunkedRewrite(path, ROTATED)
    with pytest.raises(ConfigurationError, match="changed while it was read") as caught:
        keeper_of(path, sleep=writer.step)
    assert OLD not in str(caught.value)
    assert ROTATED not in str(caught.value)


# -- the previous secret named by the operator -------------------------------------


def test_a_replica_started_inside_an_overlap_accepts_the_named_previous_secret(tmp_path):
    current, previous = tmp_path / "secret", tmp_path / "previous"
    write_secret(current, NEW)
    write_secret(previous, OLD)
    clock = FakeClock(1000.0)
    with capture_logs() as logs:
        keeper = SecretKeeper(
            {MERCHANT: SecretSource.file(current)},
            previous={MERCHANT: SecretSource.file(previous)},
            overlap=3600.0,
            clock=clock,
        )
    assert keeper.current(MERCHANT) == Secret(NEW)  # requests are signed with the current one
    assert keeper.provider(MERCHANT).current() == Secret(NEW)
    assert keeper.accepted(MERCHANT) == (Secret(NEW), Secret(OLD))
    assert [log["event"] for log in logs] == ["secret_previous_accepted"]
    clock.now += 3600.0
    assert keeper.accepted(MERCHANT) == (Secret(NEW),)
    shown = repr(logs) + repr(keeper)
    assert OLD not in shown
    assert NEW not in shown


def test_a_previous_secret_equal_to_the_current_one_is_no_second_secret(tmp_path):
    keeper = SecretKeeper(
        {MERCHANT: SecretSource.given(Secret(NEW))},
        previous={MERCHANT: SecretSource.given(Secret(NEW))},
    )
    assert keeper.accepted(MERCHANT) == (Secret(NEW),)


def test_a_rotation_seen_later_replaces_the_named_previous_secret(tmp_path):
    path = tmp_path / "secret"
    write_secret(path, OLD)
    keeper = SecretKeeper(
        {MERCHANT: SecretSource.file(path)},
        previous={MERCHANT: SecretSource.given(Secret("p" * 43))},
        clock=FakeClock(1000.0),
    )
    write_secret(path, NEW)
    assert keeper.refresh() == (MERCHANT,)
    assert keeper.accepted(MERCHANT) == (Secret(NEW), Secret(OLD))  # at most two, as the platform

"""A test's own database server (tests/support/private_servers.py) never outlives the test, and its
absence is a skip with a reason, or a failure where the services are required."""

from __future__ import annotations

import socket

import pytest
from sqlalchemy.engine import make_url
from support import private_servers
from support.dbfixtures import REQUIRE_SERVICES_ENV, SERVER_PARAMS
from support.private_servers import PrivateServer, running_private_server


def _answers(server: PrivateServer) -> bool:
    port = make_url(server.url).port
    assert port is not None
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("kind", SERVER_PARAMS)
def test_a_failing_test_leaves_no_server_and_no_folder_behind(kind: str) -> None:
    with pytest.raises(ZeroDivisionError), running_private_server(kind) as server:  # noqa: PT012
        server.stop()
        assert not _answers(server)
        server.start()
        assert _answers(server)
        assert (server.folder / "data").is_dir()
        _ = 1 / 0
    assert not _answers(server)
    assert not server.folder.exists()


def test_missing_tools_skip_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_SERVICES_ENV, raising=False)
    monkeypatch.setitem(private_servers._TOOLS, "mariadb", ("no-such-mariadb-install-db",))
    with pytest.raises(pytest.skip.Exception, match="no-such-mariadb-install-db"):
        private_servers._tools_or_skip("mariadb")


def test_missing_tools_fail_where_the_services_are_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(REQUIRE_SERVICES_ENV, "1")
    monkeypatch.setitem(private_servers._TOOLS, "postgres", ("no-such-initdb",))
    with pytest.raises(pytest.fail.Exception, match="no-such-initdb"):
        private_servers._tools_or_skip("postgres")

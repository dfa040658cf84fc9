"""The operators' configuration contract: names, defaults, precedence, and clear errors."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from recordsync import cli
from recordsync.core.database_url import parse_database_url
from recordsync.core.errors import ConfigurationError
from recordsync.core.settings import load_settings

SECRET = "s" * 43
BASE = {
    "RECORDSYNC_BASE_URL": "https://platform.example/",
    "RECORDSYNC_MERCHANT_ID": "m-1",
    "RECORDSYNC_SECRET": SECRET,
}


def test_defaults_and_required_values() -> None:
    settings = load_settings(BASE)
    assert settings.base_url == "https://platform.example"
    assert settings.merchant_id == "m-1"
    assert settings.secret is not None
    assert settings.secret.reveal() == SECRET
    assert settings.database_url == "sqlite:///recordsync.db"
    assert settings.http_port == 9108
    assert settings.history_from is None
    assert settings.poll_interval == 1.0


def test_every_problem_is_reported_at_once_naming_the_variable() -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings({"RECORDSYNC_HTTP_PORT": "http", "RECORDSYNC_HISTORY_FROM": "yesterday"})
    lines = str(caught.value).splitlines()
    named = {line.split(":")[0] for line in lines}
    assert named == {
        "RECORDSYNC_BASE_URL",
        "RECORDSYNC_SECRET or RECORDSYNC_SECRET_FILE",
        "RECORDSYNC_MERCHANT_ID",
        "RECORDSYNC_HISTORY_FROM",
        "RECORDSYNC_HTTP_PORT",
    }


def test_the_secret_never_appears_in_settings_repr_or_errors() -> None:
    settings = load_settings(BASE)
    assert SECRET not in repr(settings)
    with pytest.raises(ConfigurationError) as caught:
        load_settings({**BASE, "RECORDSYNC_SECRET_FILE": "/nonexistent"})
    assert SECRET not in str(caught.value)


def test_config_file_values_lose_to_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "recordsync.toml"
    config.write_text(
        'merchant_id = "from-file"\nhttp_port = 9200\n'
        'history_from = "2026-11-01T00:00:00Z"\npoll_interval = 2.5\n'
    )
    settings = load_settings({**BASE}, config_path=config)
    assert settings.merchant_id == "m-1"  # the environment wins
    assert settings.http_port == 9200
    assert settings.poll_interval == 2.5
    assert settings.history_from == datetime(2026, 11, 1, tzinfo=UTC)


def test_secret_file_strips_the_trailing_newline_and_warns_when_everyone_can_read(
    tmp_path: Path,
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    os.chmod(secret_file, 0o644)  # noqa: PTH101
    env = {k: v for k, v in BASE.items() if k != "RECORDSYNC_SECRET"}
    settings = load_settings({**env, "RECORDSYNC_SECRET_FILE": str(secret_file)})
    assert settings.secret is not None
    assert settings.secret.reveal() == SECRET
    assert any("readable by every user" in warning for warning in settings.warnings)
    os.chmod(secret_file, 0o640)  # noqa: PTH101 - group-readable, as a Kubernetes mount
    quiet = load_settings({**env, "RECORDSYNC_SECRET_FILE": str(secret_file)})
    assert quiet.warnings == ()


def test_both_secret_sources_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="both set"):
        load_settings({**BASE, "RECORDSYNC_SECRET_FILE": "/etc/hostname"})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RECORDSYNC_HTTP_PORT", "70000"),
        ("RECORDSYNC_PAGE_SIZE", "0"),
        ("RECORDSYNC_PAGE_SIZE", "1001"),
        ("RECORDSYNC_POLL_INTERVAL", "-1"),
        ("RECORDSYNC_TLS_VERIFY", "maybe"),
        ("RECORDSYNC_LOG_LEVEL", "loud"),
        ("RECORDSYNC_BASE_URL", "ftp://x"),
    ],
    ids=["port-range", "page-zero", "page-above-max", "poll-negative", "tls-word", "level", "url"],
)
def test_invalid_values_name_their_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        load_settings({**BASE, variable: value})


def test_port_zero_turns_the_http_server_off() -> None:
    assert load_settings({**BASE, "RECORDSYNC_HTTP_PORT": "0"}).http_port == 0


def test_migrate_needs_no_platform_settings() -> None:
    settings = load_settings({}, need_platform=False, need_merchant=False)
    assert settings.base_url is None


# -- the warehouse URL, checked with everything else ------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgres://rs:pw@db.example/warehouse",
        "postgres+psycopg://rs:pw@db.example/warehouse",
        "postgresql://rs:pw@db.example/warehouse",
        "mariadb://rs:pw@db.example/warehouse",
        "mysql+pymysql://rs:pw@db.example/warehouse",
        "sqlite:///relative.db",
    ],
    ids=[
        "postgres-alias",
        "postgres-alias-with-driver",
        "postgresql",
        "mariadb",
        "mysql",
        "sqlite",
    ],
)
def test_supported_database_urls_are_accepted(url) -> None:
    assert load_settings({**BASE, "RECORDSYNC_DATABASE_URL": url}).database_url == url


def test_postgres_scheme_is_written_through_psycopg() -> None:
    assert parse_database_url("postgres://rs:pw@db/w").drivername == "postgresql+psycopg"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("oracle://rs:s3cret@db/w", "unsupported database 'oracle'"),
        ("not a url at all s3cret", "not a database URL"),
        ("postgresql+psycopg2://rs:s3cret@db/w", "use a postgresql+psycopg:// URL"),
        ("://rs:s3cret@db/w", "not a database URL"),
    ],
    ids=["unknown-scheme", "unparseable", "other-driver", "no-scheme"],
)
def test_a_bad_database_url_is_one_line_naming_the_variable_and_the_schemes(url, expected):
    with pytest.raises(ConfigurationError) as caught:
        load_settings({**BASE, "RECORDSYNC_DATABASE_URL": url, "RECORDSYNC_PAGE_SIZE": "x"})
    lines = str(caught.value).splitlines()
    (line,) = [line for line in lines if line.startswith("RECORDSYNC_DATABASE_URL:")]
    assert expected in line
    assert "s3cret" not in str(caught.value)
    assert any(line.startswith("RECORDSYNC_PAGE_SIZE:") for line in lines)  # all at once
    if "unsupported" in expected or "not a database" in expected:
        assert "postgresql://" in line
        assert "sqlite:///" in line


@pytest.mark.parametrize("command", ["status", "run", "migrate", "report", "backfill"])
@pytest.mark.parametrize(
    "url", ["oracle://rs:s3cret@db/w", "s3cret garbage"], ids=["unknown", "unparseable"]
)
def test_every_command_exits_2_on_a_bad_database_url_without_a_traceback(
    command, url, tmp_path, capsys
):
    config = tmp_path / "recordsync.toml"
    config.write_text(
        f'base_url = "https://platform.example"\nmerchant_id = "m-1"\nsecret = "{SECRET}"\n'
        f'database_url = "{url}"\n'
    )
    extra = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"]
    argv = ["--config", str(config), command, *(extra if command == "backfill" else [])]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("recordsync: configuration: RECORDSYNC_DATABASE_URL:")
    assert len(err.splitlines()) == 1
    assert "s3cret" not in err
    assert "Traceback" not in err


def test_demo_refuses_a_bad_database_url_with_exit_2(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["demo", "--database", "oracle://rs:s3cret@db/w"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "unsupported database 'oracle'" in err
    assert "s3cret" not in err

"""The operators' configuration contract: names, defaults, precedence, and clear errors."""

from __future__ import annotations

import os
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

import pytest

from recordsync import cli
from recordsync.core.database_url import parse_database_url
from recordsync.core.errors import ConfigurationError
from recordsync.core.secret import SecretSource
from recordsync.core.settings import (
    DEFAULT_EVENTS_HOST,
    SETTING_KINDS,
    MerchantSettings,
    Settings,
    load_settings,
)
from recordsync.service.secrets import SecretKeeper

SECRET = "s" * 43
BASE = {
    "RECORDSYNC_BASE_URL": "https://platform.example/",
    "RECORDSYNC_MERCHANT_ID": "m-1",
    "RECORDSYNC_SECRET": SECRET,
}


def test_defaults_and_required_values() -> None:
    settings = load_settings(BASE)
    merchant = settings.merchant()
    assert merchant.base_url == "https://platform.example"
    assert merchant.merchant_id == "m-1"
    assert merchant.secret is not None
    assert merchant.secret.value is not None
    assert merchant.secret.value.reveal() == SECRET
    assert settings.database_url == "sqlite:///recordsync.db"
    assert settings.http_port == 9108
    assert merchant.history_from is None
    assert settings.poll_interval == 1.0
    assert settings.secret_overlap == 86400.0


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
    assert settings.merchant().merchant_id == "m-1"  # the environment wins
    assert settings.http_port == 9200
    assert settings.poll_interval == 2.5
    assert settings.merchant().history_from == datetime(2026, 11, 1, tzinfo=UTC)


def test_secret_file_strips_the_trailing_newline_and_warns_when_everyone_can_read(
    tmp_path: Path,
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    os.chmod(secret_file, 0o644)  # noqa: PTH101
    env = {k: v for k, v in BASE.items() if k != "RECORDSYNC_SECRET"}
    settings = load_settings({**env, "RECORDSYNC_SECRET_FILE": str(secret_file)})
    assert settings.merchant().secret == SecretSource.file(secret_file)
    assert SecretKeeper.from_settings(settings).current("m-1").reveal() == SECRET
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
    assert settings.merchants == ()


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


# -- several merchants ------------------------------------------------------------


def merchant_secret(merchant_id: str) -> str:
    """A 43-character secret of the merchant's own (spec: Authentication)."""
    return f"{merchant_id}-{SECRET}"[:43]


def secret_files(tmp_path: Path, *merchant_ids: str) -> dict[str, Path]:
    """One mounted secret per merchant, each with its own value, readable by its owner only."""
    paths = {}
    for merchant_id in merchant_ids:
        path = tmp_path / f"secret-{merchant_id}"
        path.write_text(merchant_secret(merchant_id) + "\n", encoding="utf-8")
        path.chmod(0o600)
        paths[merchant_id] = path
    return paths


def write_fleet(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(body, encoding="utf-8")
    return path


def issue_example(tmp_path: Path) -> Path:
    """The issue's example, with the secret files where this test can write them."""
    secrets = secret_files(tmp_path, "brand-a", "brand-b")
    return write_fleet(
        tmp_path,
        'base_url = "https://platform.example"\n'
        'database_url = "postgresql+psycopg://recordsync@db/warehouse"\n'
        'history_from = "2026-01-01T00:00:00Z"\n'
        "[[merchants]]\n"
        'merchant_id = "brand-a"\n'
        f'secret_file = "{secrets["brand-a"]}"\n'
        "[[merchants]]\n"
        'merchant_id = "brand-b"\n'
        f'secret_file = "{secrets["brand-b"]}"\n'
        'history_from = "2026-06-01T00:00:00Z"\n',
    )


def test_the_issue_example_loads_two_merchants_with_the_defaults_applied(tmp_path):
    settings = load_settings({}, config_path=issue_example(tmp_path))
    assert settings.merchants == (
        MerchantSettings(
            merchant_id="brand-a",
            secret=SecretSource.file(tmp_path / "secret-brand-a"),
            base_url="https://platform.example",
            history_from=datetime(2026, 1, 1, tzinfo=UTC),
        ),
        MerchantSettings(
            merchant_id="brand-b",
            secret=SecretSource.file(tmp_path / "secret-brand-b"),
            base_url="https://platform.example",
            history_from=datetime(2026, 6, 1, tzinfo=UTC),
        ),
    )
    assert settings.database_url == "postgresql+psycopg://recordsync@db/warehouse"
    keeper = SecretKeeper.from_settings(settings)
    assert keeper.current("brand-b").reveal() == merchant_secret("brand-b")


def test_an_entry_s_own_values_win_and_the_environment_sets_the_defaults(tmp_path):
    config = write_fleet(
        tmp_path,
        'base_url = "https://file.example"\n'
        'history_from = "2026-01-01T00:00:00Z"\n'
        "[[merchants]]\n"
        'merchant_id = "own"\n'
        f'secret = "{SECRET}"\n'
        'base_url = "https://own.example/"\n'
        "history_from = 2026-03-01T00:00:00Z\n"  # an unquoted TOML date-time is fine too
        "[[merchants]]\n"
        'merchant_id = "defaults"\n'
        f'secret = "{SECRET}"\n',
    )
    environ = {
        "RECORDSYNC_BASE_URL": "https://env.example",
        "RECORDSYNC_HISTORY_FROM": "2026-02-01T00:00:00Z",
    }
    settings = load_settings(environ, config_path=config)
    own, defaults = settings.merchants
    assert (own.base_url, own.history_from) == (
        "https://own.example",
        datetime(2026, 3, 1, tzinfo=UTC),
    )
    assert (defaults.base_url, defaults.history_from) == (
        "https://env.example",
        datetime(2026, 2, 1, tzinfo=UTC),
    )


def test_every_problem_in_the_file_is_reported_at_once_naming_merchant_and_key(tmp_path, capsys):
    secrets = secret_files(tmp_path, "brand-a")
    empty = tmp_path / "empty-secret"
    empty.write_text("\n", encoding="utf-8")
    config = write_fleet(
        tmp_path,
        'history_from = "last tuesday"\n'
        "[[merchants]]\n"
        'merchant_id = "brand-a"\n'
        f'secret_file = "{secrets["brand-a"]}"\n'
        'base_url = "https://platform.example"\n'
        "[[merchants]]\n"
        'merchant_id = "brand-b"\n'  # no secret at all
        'base_url = "ftp://platform.example"\n'
        'history_from = "2026-13-01T00:00:00Z"\n'
        "[[merchants]]\n"
        'merchant_id = "brand-a"\n'  # again
        f'secret = "{SECRET}"\n'
        'base_url = "https://platform.example"\n'
        "[[merchants]]\n"
        'merchant_id = "brand-c"\n'
        f'secret_file = "{tmp_path / "absent"}"\n'
        'secretfile = "typo"\n'
        "[[merchants]]\n"
        'merchant_id = "brand-d"\n'
        f'secret_file = "{empty}"\n'
        'base_url = "https://platform.example"\n'
        "[[merchants]]\n"
        f'secret = "{SECRET}"\n'
        'base_url = "https://platform.example"\n',
    )
    assert cli.main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    lines = [line.removeprefix("recordsync: configuration: ") for line in err.splitlines()]
    named = sorted(line.split(": ")[0] for line in lines)
    assert named == sorted(
        [
            "RECORDSYNC_HISTORY_FROM",  # the top-level default
            "merchants[1] (brand-b).base_url",
            "merchants[1] (brand-b).secret or secret_file",
            "merchants[1] (brand-b).history_from",
            "merchants[2] (brand-a).merchant_id",  # the duplicate
            "merchants[3] (brand-c).base_url",  # no own, no valid default
            "merchants[3] (brand-c).secret_file",  # cannot read
            "merchants[3] (brand-c).secretfile",  # unknown key
            "merchants[4] (brand-d).secret_file",  # empty
            "merchants[5].merchant_id",  # required
        ]
    )
    assert any(
        "merchants[2] (brand-a).merchant_id: a duplicate of merchants[0]" in line for line in lines
    )
    assert any(line.endswith("is empty") for line in lines)
    assert SECRET not in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("environ", "top_level", "named"),
    [
        ({"RECORDSYNC_MERCHANT_ID": "m-1"}, "", "RECORDSYNC_MERCHANT_ID"),
        ({}, 'merchant_id = "m-1"\n', "the top-level merchant_id in --config"),
        ({"RECORDSYNC_SECRET": SECRET}, "", "RECORDSYNC_SECRET"),
        ({}, 'secret_file = "/run/secret"\n', "the top-level secret_file in --config"),
    ],
    ids=["env-merchant", "file-merchant", "env-secret", "file-secret-file"],
)
def test_merchants_in_both_places_is_an_error_naming_both(tmp_path, environ, top_level, named):
    config = write_fleet(
        tmp_path,
        f'base_url = "https://platform.example"\n{top_level}'
        f'[[merchants]]\nmerchant_id = "brand-a"\nsecret = "{SECRET}"\n',
    )
    with pytest.raises(ConfigurationError) as caught:
        load_settings(environ, config_path=config)
    (line,) = str(caught.value).splitlines()
    assert line.startswith(f"[[merchants]] in --config and {named}:")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('merchants = "brand-a"\n', "merchants: must be an array of tables"),
        ("merchants = []\n", "merchants: empty"),
        (
            'histroy_from = "2026-01-01T00:00:00Z"\n[[merchants]]\nmerchant_id = "a"\n',
            "--config: unknown key 'histroy_from'",
        ),
    ],
    ids=["not-tables", "empty", "misspelt-top-level-key"],
)
def test_a_malformed_merchants_table_is_a_clear_error(tmp_path, body, expected):
    with pytest.raises(ConfigurationError) as caught:
        load_settings({}, config_path=write_fleet(tmp_path, body), need_platform=False)
    (line,) = str(caught.value).splitlines()
    assert line.startswith(expected)


def test_commands_without_the_platform_read_no_secret(tmp_path):
    config = write_fleet(
        tmp_path,
        '[[merchants]]\nmerchant_id = "brand-a"\nsecret_file = "/not/mounted/here"\n',
    )
    settings = load_settings({}, config_path=config, need_platform=False)
    assert settings.merchants == (MerchantSettings("brand-a"),)


FLEET = Settings(merchants=(MerchantSettings("brand-a"), MerchantSettings("brand-b")))
SINGLE = Settings(merchants=(MerchantSettings("brand-a"),))


@pytest.mark.parametrize(
    ("settings", "asked", "expected"),
    [
        (SINGLE, None, "brand-a"),
        (SINGLE, "brand-a", "brand-a"),
        (FLEET, "brand-b", "brand-b"),
        (FLEET, None, "several merchants are configured (brand-a, brand-b)"),
        (FLEET, "brand-z", "'brand-z' is not configured; configured: brand-a, brand-b"),
        (Settings(), None, "no merchant is configured"),
    ],
    ids=["the-only-one", "the-only-one-named", "named", "ambiguous", "unknown", "none"],
)
def test_merchant_picks_the_only_or_the_named_one_or_names_the_choices(settings, asked, expected):
    if expected.startswith("brand-"):
        assert settings.merchant(asked).merchant_id == expected
        return
    with pytest.raises(ConfigurationError) as caught:
        settings.merchant(asked)
    assert expected in str(caught.value)


@pytest.mark.parametrize("command", ["run", "backfill", "migrate", "status", "report"])
@pytest.mark.parametrize("where", ["before", "after"])
def test_config_is_read_before_and_after_the_subcommand(tmp_path, capsys, command, where):
    config = write_fleet(tmp_path, 'http_port = "not a port"\n')
    extra = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"]
    rest = [command, *(extra if command == "backfill" else [])]
    option = ["--config", str(config)]
    assert cli.main([*option, *rest] if where == "before" else [*rest, *option]) == 2
    assert "RECORDSYNC_HTTP_PORT: 'not a port' is not a port" in capsys.readouterr().err


def test_the_secret_overlap_is_configurable_and_checked():
    assert load_settings({**BASE, "RECORDSYNC_SECRET_OVERLAP": "600"}).secret_overlap == 600.0
    with pytest.raises(ConfigurationError, match="RECORDSYNC_SECRET_OVERLAP"):
        load_settings({**BASE, "RECORDSYNC_SECRET_OVERLAP": "-1"})


# -- round-end notifications ---------------------------------------------------------


def test_the_events_receiver_is_off_by_default_and_binds_like_the_metrics_port():
    settings = load_settings(BASE)
    assert (settings.events_port, settings.events_host, settings.event_grace) == (
        0,
        DEFAULT_EVENTS_HOST,
        600.0,
    )
    assert DEFAULT_EVENTS_HOST == "0.0.0.0"  # noqa: S104 - the default under test


def test_the_events_settings_come_from_the_environment_or_the_file(tmp_path: Path) -> None:
    config = tmp_path / "recordsync.toml"
    config.write_text('events_port = 9300\nevents_host = "127.0.0.1"\nevent_grace = 60\n')
    settings = load_settings(BASE, config_path=config)
    assert (settings.events_port, settings.events_host, settings.event_grace) == (
        9300,
        "127.0.0.1",
        60.0,
    )
    assert (
        load_settings({**BASE, "RECORDSYNC_EVENTS_PORT": "9400"}, config_path=config).events_port
        == 9400
    )


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RECORDSYNC_EVENTS_PORT": "70000"}, "RECORDSYNC_EVENTS_PORT: '70000' is not a port"),
        ({"RECORDSYNC_EVENT_GRACE": "0"}, "RECORDSYNC_EVENT_GRACE: '0' is not a positive"),
        (
            {"RECORDSYNC_EVENTS_PORT": "9108"},
            "RECORDSYNC_EVENTS_PORT: 9108 is RECORDSYNC_HTTP_PORT too",
        ),
    ],
    ids=["port range", "grace", "same as metrics"],
)
def test_bad_events_settings_name_their_variable(environ, expected):
    with pytest.raises(ConfigurationError) as caught:
        load_settings({**BASE, **environ})
    assert expected in str(caught.value)


def test_recordsync_config_names_the_file_and_config_wins_over_it(tmp_path):
    """RECORDSYNC_CONFIG is the file when no --config is given (a unit's Environment=)."""
    from_env = write_fleet(tmp_path, 'http_port = 9200\nmerchant_id = "m-env"\n')
    other = tmp_path / "other.toml"
    other.write_text('http_port = 9300\nmerchant_id = "m-option"\n', encoding="utf-8")
    environ = {"RECORDSYNC_CONFIG": str(from_env)}
    assert load_settings(environ, need_platform=False).http_port == 9200
    chosen = load_settings(environ, config_path=other, need_platform=False)
    assert (chosen.http_port, chosen.merchant().merchant_id) == (9300, "m-option")
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_settings({"RECORDSYNC_CONFIG": str(tmp_path / "missing.toml")})


def test_recordsync_config_reaches_every_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RECORDSYNC_CONFIG", str(write_fleet(tmp_path, 'http_port = "x"\n')))
    assert cli.main(["run"]) == 2
    assert "RECORDSYNC_HTTP_PORT: 'x' is not a port" in capsys.readouterr().err


def test_a_relative_secret_file_of_an_entry_is_beside_the_config_file(tmp_path, monkeypatch):
    """A unit's credentials directory holds the file and the secrets; it differs per unit."""
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "merchants_brand-a").write_text(SECRET, encoding="utf-8")
    (credentials / "merchants_brand-a").chmod(0o600)
    config = credentials / "recordsync.toml"
    config.write_text(
        'base_url = "https://platform.example"\n'
        '[[merchants]]\nmerchant_id = "brand-a"\nsecret_file = "merchants_brand-a"\n'
        '[[merchants]]\nmerchant_id = "brand-b"\nsecret_file = "merchants_brand-b"\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)  # not where the secrets are
    with pytest.raises(ConfigurationError) as caught:
        load_settings({"RECORDSYNC_CONFIG": str(config)})
    (line,) = str(caught.value).splitlines()
    assert line.startswith("merchants[1] (brand-b).secret_file: cannot read ")
    assert str(credentials / "merchants_brand-b") in line
    (credentials / "merchants_brand-b").write_text(SECRET, encoding="utf-8")
    (credentials / "merchants_brand-b").chmod(0o600)
    settings = load_settings({"RECORDSYNC_CONFIG": str(config)})
    assert settings.merchant("brand-a").secret == SecretSource.file(
        credentials / "merchants_brand-a"
    )


def test_the_catalogue_interval_defaults_to_an_hour_and_zero_turns_it_off(tmp_path: Path) -> None:
    assert load_settings(BASE).catalogue_interval == 3600.0
    assert load_settings({**BASE, "RECORDSYNC_CATALOGUE_INTERVAL": "0"}).catalogue_interval == 0
    config = tmp_path / "recordsync.toml"
    config.write_text("catalogue_interval = 900\n")
    assert load_settings({**BASE}, config_path=config).catalogue_interval == 900
    with pytest.raises(ConfigurationError, match="RECORDSYNC_CATALOGUE_INTERVAL"):
        load_settings({**BASE, "RECORDSYNC_CATALOGUE_INTERVAL": "-1"})


# -- the secret's form and the previous secret ------------------------------------

PREVIOUS = "p" * 43


def write_secret_file(path: Path, value: str) -> Path:
    path.write_text(value + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (SECRET[:20], "does not hold a 43-character secret"),
        (SECRET + "s", "does not hold a 43-character secret"),
        (SECRET[:20] + " " + SECRET[21:], "whitespace inside"),
        (SECRET[:42] + "é", "printable ASCII"),
    ],
    ids=["half-written", "too-long", "inner-space", "not-ascii"],
)
def test_a_secret_file_not_in_the_secrets_form_is_reported(tmp_path, content, reason):
    path = write_secret_file(tmp_path / "secret", content)
    env = {k: v for k, v in BASE.items() if k != "RECORDSYNC_SECRET"}
    with pytest.raises(ConfigurationError) as caught:
        load_settings({**env, "RECORDSYNC_SECRET_FILE": str(path)})
    (line,) = str(caught.value).splitlines()
    assert line.startswith(f"RECORDSYNC_SECRET_FILE: {path} ")
    assert reason in line
    assert content not in line


def test_the_previous_secret_file_is_accepted_beside_the_current_one(tmp_path):
    previous = write_secret_file(tmp_path / "previous", PREVIOUS)
    settings = load_settings({**BASE, "RECORDSYNC_PREVIOUS_SECRET_FILE": str(previous)})
    merchant = settings.merchant()
    assert merchant.previous_secret == SecretSource.file(previous)
    keeper = SecretKeeper.from_settings(settings, settle=0.0)
    assert keeper.current("m-1").reveal() == SECRET
    assert [secret.reveal() for secret in keeper.accepted("m-1")] == [SECRET, PREVIOUS]
    assert PREVIOUS not in repr(settings)


def test_an_entry_names_its_previous_secret_file_beside_the_config_file(tmp_path):
    write_secret_file(tmp_path / "brand-a", SECRET)
    write_secret_file(tmp_path / "brand-a.previous", PREVIOUS)
    config = write_fleet(
        tmp_path,
        'base_url = "https://platform.example"\n'
        '[[merchants]]\nmerchant_id = "brand-a"\nsecret_file = "brand-a"\n'
        'previous_secret_file = "brand-a.previous"\n'
        '[[merchants]]\nmerchant_id = "brand-b"\nsecret = "' + "b" * 43 + '"\n',
    )
    settings = load_settings({}, config_path=config)
    assert settings.merchant("brand-a").previous_secret == SecretSource.file(
        tmp_path / "brand-a.previous"
    )
    assert settings.merchant("brand-b").previous_secret is None
    keeper = SecretKeeper.from_settings(settings, settle=0.0)
    assert [secret.reveal() for secret in keeper.accepted("brand-a")] == [SECRET, PREVIOUS]
    assert [secret.reveal() for secret in keeper.accepted("brand-b")] == ["b" * 43]


def test_a_broken_previous_secret_is_reported_with_every_other_problem(tmp_path):
    write_secret_file(tmp_path / "brand-a", SECRET)
    write_secret_file(tmp_path / "brand-a.previous", PREVIOUS[:10])
    config = write_fleet(
        tmp_path,
        'base_url = "https://platform.example"\n'
        '[[merchants]]\nmerchant_id = "brand-a"\nsecret_file = "brand-a"\n'
        'previous_secret_file = "brand-a.previous"\n'
        '[[merchants]]\nmerchant_id = "brand-b"\nsecret = "' + "b" * 43 + '"\n'
        'previous_secret = "x"\nprevious_secret_file = "absent"\n',
    )
    with pytest.raises(ConfigurationError) as caught:
        load_settings({}, config_path=config)
    lines = str(caught.value).splitlines()
    both = "merchants[1] (brand-b).previous_secret and merchants[1] (brand-b).previous_secret_file"
    assert [line.split(": ")[0] for line in lines] == [
        "merchants[0] (brand-a).previous_secret_file",
        f"{both} are both set",
    ]
    assert PREVIOUS[:10] not in str(caught.value)


def test_a_previous_secret_outside_the_merchants_entries_is_refused(tmp_path):
    config = write_fleet(
        tmp_path,
        'base_url = "https://platform.example"\n'
        '[[merchants]]\nmerchant_id = "brand-a"\nsecret = "' + SECRET + '"\n',
    )
    with pytest.raises(ConfigurationError, match="RECORDSYNC_PREVIOUS_SECRET_FILE"):
        load_settings({"RECORDSYNC_PREVIOUS_SECRET_FILE": "/run/previous"}, config_path=config)


# -- the tail's pace ------------------------------------------------------------------


def test_the_tails_pace_has_its_defaults_and_comes_from_the_environment():
    settings = load_settings(BASE)
    assert (settings.poll_ceiling, settings.safety_poll, settings.snapshot_tail_interval) == (
        10.0,
        10.0,
        10.0,
    )
    changed = load_settings(
        {
            **BASE,
            "RECORDSYNC_POLL_CEILING": "30",
            "RECORDSYNC_SAFETY_POLL": "15",
            "RECORDSYNC_SNAPSHOT_TAIL_INTERVAL": "2.5",
        }
    )
    assert (changed.poll_ceiling, changed.safety_poll, changed.snapshot_tail_interval) == (
        30.0,
        15.0,
        2.5,
    )


@pytest.mark.parametrize(
    "variable",
    ["RECORDSYNC_POLL_CEILING", "RECORDSYNC_SAFETY_POLL", "RECORDSYNC_SNAPSHOT_TAIL_INTERVAL"],
)
@pytest.mark.parametrize("value", ["0", "-5", "inf", "nan", "soon"])
def test_a_wait_of_the_tail_that_is_not_a_positive_finite_number_is_refused(variable, value):
    with pytest.raises(ConfigurationError, match=variable):
        load_settings({**BASE, variable: value})


def test_readiness_allows_for_the_tails_longest_wait():
    """An idle tail commits at its first read after 10 polls: with a ceiling of 60 s two
    commits may be 70 s apart, which the default 30 poll intervals would call stuck."""
    assert load_settings(BASE).readiness_multiple == 40.0  # 2 x (10 + 10) / 1
    stretched = load_settings({**BASE, "RECORDSYNC_POLL_CEILING": "60"})
    assert stretched.readiness_multiple == 2 * (10 + 60)
    # The safety poll counts only where notifications are received.
    quiet = load_settings({**BASE, "RECORDSYNC_SAFETY_POLL": "100"})
    assert quiet.readiness_multiple == 40.0
    notified = load_settings(
        {**BASE, "RECORDSYNC_SAFETY_POLL": "100", "RECORDSYNC_EVENTS_PORT": "9109"}
    )
    assert notified.readiness_multiple == 2 * (10 + 100)
    patient = load_settings({**BASE, "RECORDSYNC_READY_MULTIPLE": "500"})
    assert patient.readiness_multiple == 500.0


# -- the fleet's tick and lease ---------------------------------------------------------


def test_the_fleet_keeps_its_tick_and_lease_unless_told_and_derives_the_staleness():
    settings = load_settings(BASE)
    assert (settings.fleet_tick, settings.lease_seconds) == (2.0, 10)
    assert settings.heartbeat_stale_after == 6.0
    quick = load_settings({**BASE, "RECORDSYNC_FLEET_TICK": "0.5", "RECORDSYNC_LEASE_SECONDS": "5"})
    assert (quick.fleet_tick, quick.lease_seconds, quick.heartbeat_stale_after) == (0.5, 5, 1.5)
    # Exactly three ticks is enough.
    assert load_settings({**BASE, "RECORDSYNC_LEASE_SECONDS": "6"}).lease_seconds == 6


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RECORDSYNC_FLEET_TICK": "0"}, "RECORDSYNC_FLEET_TICK: '0' is not a positive number"),
        ({"RECORDSYNC_FLEET_TICK": "inf"}, "RECORDSYNC_FLEET_TICK: 'inf' is not a positive"),
        ({"RECORDSYNC_FLEET_TICK": "nan"}, "RECORDSYNC_FLEET_TICK: 'nan' is not a positive"),
        ({"RECORDSYNC_LEASE_SECONDS": "1"}, "RECORDSYNC_LEASE_SECONDS: '1' is not a whole"),
        ({"RECORDSYNC_LEASE_SECONDS": "7.5"}, "RECORDSYNC_LEASE_SECONDS: '7.5' is not a whole"),
        (
            {"RECORDSYNC_LEASE_SECONDS": "5"},
            (
                "RECORDSYNC_LEASE_SECONDS: 5 is shorter than 3 fleet ticks "
                "(RECORDSYNC_FLEET_TICK 2): the database would end the lock session of a replica "
                "the fleet still counts live; at least 6"
            ),
        ),
        (
            {"RECORDSYNC_FLEET_TICK": "4", "RECORDSYNC_LEASE_SECONDS": "11"},
            (
                "RECORDSYNC_LEASE_SECONDS: 11 is shorter than 3 fleet ticks "
                "(RECORDSYNC_FLEET_TICK 4): the database would end the lock session of a replica "
                "the fleet still counts live; at least 12"
            ),
        ),
    ],
    ids=[
        "tick zero",
        "tick infinite",
        "tick nan",
        "lease one",
        "lease fraction",
        "lease short",
        "tick long",
    ],
)
def test_a_bad_tick_or_lease_is_refused_naming_its_variable(environ, expected):
    with pytest.raises(ConfigurationError) as caught:
        load_settings({**BASE, **environ})
    assert expected in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1  # an unreadable one is not compared too


def test_a_lease_too_short_for_its_tick_stops_the_daemon_with_exit_2(capsys, monkeypatch):
    for name, value in {**BASE, "RECORDSYNC_LEASE_SECONDS": "3"}.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["run"]) == 2
    err = capsys.readouterr().err
    assert "RECORDSYNC_LEASE_SECONDS: 3 is shorter than 3 fleet ticks" in err
    assert "Traceback" not in err


def test_every_setting_is_read_by_one_kind_and_defaults_to_its_field():
    """One table says how each setting is read (``SETTING_KINDS``); its default is the
    ``Settings`` field's, so no default is written twice."""
    read_apart = {"merchants", "database_url", "warnings"}
    assert set(SETTING_KINDS) == {item.name for item in fields(Settings)} - read_apart
    defaults = load_settings(BASE)
    for item in fields(Settings):
        if item.name not in read_apart:
            assert getattr(defaults, item.name) == item.default, item.name

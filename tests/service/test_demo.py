"""``recordsync demo``: the README's first command, with one merchant or several side by side."""

from __future__ import annotations

import pytest

from recordsync import cli


@pytest.mark.slow
@pytest.mark.parametrize(
    ("merchants", "summary"), [(1, "synced"), (3, "of 3 merchants")], ids=["one", "three"]
)
def test_the_demo_syncs_until_caught_up_and_equals_the_truth(tmp_path, capsys, merchants, summary):
    database = f"sqlite:///{tmp_path / 'demo.db'}"
    argv = ["demo", "--database", database, "--history-days", "1", "--rounds-per-day", "300"]
    assert cli.main([*argv, "--merchants", str(merchants)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert summary in out
    assert "equals the simulator's truth" in out
    assert (tmp_path / "recordsync-demo.toml").exists()  # beside its database, not in the cwd
    if merchants > 1:
        for number in range(1, merchants + 1):
            assert f"demo-merchant-{number}" in out

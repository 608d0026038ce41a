"""The data demo end to end, as ``make demo`` runs it: a generated sales export given as an
input, totals computed with pandas in the data image, a chart and a table back as artifacts,
checked on the host. And the example's parts on their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from examples.data import RegionTotal, host_totals, write_sales
from tests.conftest import DATA_IMAGE, IMAGE, require_docker

REPO = Path(__file__).resolve().parents[3]


def test_the_export_is_seeded_and_the_host_sums_it(tmp_path: Path) -> None:
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    orders = write_sales(first, size_bytes=200_000)
    assert write_sales(second, size_bytes=200_000) == orders
    assert first.read_bytes() == second.read_bytes()
    assert first.stat().st_mode & 0o444 == 0o444  # the sandbox's user reads it
    totals = host_totals(first)
    assert sum(t.orders for t in totals.values()) == orders
    assert list(totals) == sorted(totals)
    assert all(isinstance(t, RegionTotal) and t.amount_cents > 0 for t in totals.values())


@pytest.mark.docker
def test_the_demo_runs_end_to_end_within_its_time(tmp_path: Path) -> None:
    require_docker(DATA_IMAGE)
    env = {
        **os.environ,
        "AIRLOCK_HOME": str(tmp_path / "home"),
        "AIRLOCK_IMAGE": IMAGE,
        "AIRLOCK_DATA_IMAGE": DATA_IMAGE,
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [sys.executable, "-m", "examples.data.demo"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "data demo done" in out
    assert "refused (grant)" in out  # a principal without read(file:sales.csv)
    assert "NO" not in out.split("host agrees")[1].split("artifact")[0]
    stored = sorted((tmp_path / "home" / "artifacts").rglob("*.*"))
    assert [p.name for p in stored] == ["region_totals.csv", "region_totals.png"]
    for path in stored:
        assert str(path) in out  # the demo prints where the artifacts are
    exports = list((tmp_path / "home" / "demo" / "data").rglob("sales.csv"))
    assert [round(p.stat().st_size / 1e6) for p in exports] == [50]
    # What entered the model's context: the totals and the references, not the 50 MB.
    result = out.split("result → model (")[1].split(" bytes")[0]
    assert int(result.replace(",", "")) < 3000
    assert stored[0].read_text().startswith("region,orders,units,amount_cents\n")

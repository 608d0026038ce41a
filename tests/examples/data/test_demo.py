"""The data demo end to end, as ``make demo`` runs it: a generated sales export given as an
input, totals computed with pandas in the data image, a chart and a table back as artifacts,
checked on the host. And the example's parts on their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from airlock.policies import UsageError
from airlock.sandbox import InputRefused
from examples.data import RegionTotal, host_totals, write_sales
from examples.data import demo as demo_module
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


def _demo_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(demo_module.demo)
    return app


# (case, --size-mb): sizes that are no size of an export the demo can give as an input (at
# most 1000 MB, below the data image's 1 GiB input limit).
BAD_SIZES = [
    ("infinite", "inf"),
    ("negative_infinite", "-inf"),
    ("not_a_number", "nan"),
    ("negative", "-1"),
    ("zero", "0"),
    ("below_a_kilobyte", "0.0009"),
    ("past_the_input_limit", "1000.5"),
    ("huge", "1e308"),
    ("no_number", "fifty"),
]


@pytest.mark.parametrize("size", [c[1] for c in BAD_SIZES], ids=[c[0] for c in BAD_SIZES])
def test_a_size_that_is_no_export_s_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    ran: list[int] = []

    async def run_demo(console: object, *, size_bytes: int) -> None:
        ran.append(size_bytes)

    monkeypatch.setattr(demo_module, "run_demo", run_demo)
    done = CliRunner().invoke(_demo_app(), [f"--size-mb={size}"])
    assert done.exit_code == 2, done.output
    assert not isinstance(done.exception, Exception) or isinstance(done.exception, SystemExit), (
        done.exception
    )
    assert "--size-mb" in done.output
    assert "Traceback" not in done.output
    assert ran == []
    assert not (tmp_path / "home").exists()


# (case, what the session raises, the code printed): a refused session is an error of the
# demo's use, exit 2 with its code, no traceback.
REFUSED = [
    ("input_refused", InputRefused("sales.csv is 2 GB", name="sales.csv", reason="size"),
     "input_refused"),
    ("usage_error", UsageError("bad run"), "usage_error"),
]  # fmt: skip


@pytest.mark.parametrize(("error", "code"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_refused_session_exits_2_with_its_code(
    monkeypatch: pytest.MonkeyPatch, error: Exception, code: str
) -> None:
    async def run_demo(console: object, *, size_bytes: int) -> None:
        raise error

    monkeypatch.setattr(demo_module, "run_demo", run_demo)
    done = CliRunner().invoke(_demo_app(), ["--size-mb", "1"])
    assert done.exit_code == 2, done.output
    assert isinstance(done.exception, SystemExit), done.exception
    assert f"({code})" in done.output
    assert str(error) in done.output


@pytest.mark.parametrize("size", ["0.001", "50", "1000"])
def test_a_size_within_range_is_given_to_the_demo(
    monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    ran: list[int] = []

    async def run_demo(console: object, *, size_bytes: int) -> None:
        ran.append(size_bytes)

    monkeypatch.setattr(demo_module, "run_demo", run_demo)
    done = CliRunner().invoke(_demo_app(), ["--size-mb", size])
    assert done.exit_code == 0, done.output
    assert ran == [int(float(size) * 1e6)]

"""Files in and out on the command line: ``airlock run --input/--out/--image``, ``airlock
artifacts``, the sandbox options of ``serve`` and ``chat``, and artifacts as MCP resources."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import typer
from mcp import Client
from mcp.shared.exceptions import MCPError
from typer.testing import CliRunner

from airlock.cli import app
from airlock.cli._run import RestrictedDataImage, profile_options
from airlock.cli._serve import SandboxOptions
from airlock.frontends.mcp import build_mcp_server
from airlock.harness import ModelResult
from airlock.policies import SandboxProfile
from airlock.sandbox._artifacts import ArtifactReceiver
from tests.airlock.fake_surface import EchoSurface
from tests.airlock.inventory_registry import POLICY_ARG, REGISTRY_REF, REPO
from tests.conftest import DATA_IMAGE, require_docker

cli = CliRunner()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sales(tmp_path: Path) -> Path:
    data = tmp_path / "sales.csv"
    data.write_text("region,amount\nnorth,10\nsouth,32\nnorth,5\n")
    data.chmod(0o644)
    return data


PROGRAM = """
import pandas as pd
import matplotlib.pyplot as plt
sales = pd.read_csv("/data/sales.csv")
totals = sales.groupby("region")["amount"].sum()
totals.to_csv("/out/totals.csv")
figure, axes = plt.subplots()
axes.bar(totals.index, totals.values)
figure.savefig("/out/totals.png")
{region: int(amount) for region, amount in totals.items()}
"""


@pytest.mark.docker
def test_run_gives_inputs_and_copies_artifacts_out(tmp_path: Path) -> None:
    require_docker(DATA_IMAGE)
    program = tmp_path / "totals.py"
    program.write_text(PROGRAM)
    out = tmp_path / "out"
    args = ["run", str(program), "--image", "data", "--input", str(_sales(tmp_path))]
    outcome = cli.invoke(app, [*args, "--out", str(out), "--timeout", "60"])
    assert outcome.exit_code == 0, outcome.output
    assert '"north": 15' in outcome.output
    assert "totals.csv" in outcome.output
    assert "totals.png" in outcome.output
    assert (out / "totals.csv").read_text() == "region,amount\nnorth,15\nsouth,32\n"
    assert (out / "totals.png").read_bytes().startswith(b"\x89PNG")
    run_id = outcome.output.split("run ")[-1].split()[0]
    listed = cli.invoke(app, ["artifacts", "list", run_id, "--json"])
    assert listed.exit_code == 0, listed.output
    refs = {ref["name"]: ref for ref in json.loads(listed.output)}
    assert sorted(refs) == ["totals.csv", "totals.png"]
    digest = hashlib.sha256((out / "totals.png").read_bytes()).hexdigest()
    assert refs["totals.png"]["sha256"] == digest
    fetched = cli.invoke(app, ["artifacts", "get", run_id, "totals.csv", "--to", "-"])
    assert fetched.exit_code == 0
    assert fetched.output == "region,amount\nnorth,15\nsouth,32\n"
    again = tmp_path / "again"
    copied = cli.invoke(app, ["artifacts", "get", run_id, "totals.png", "--to", str(again)])
    assert copied.exit_code == 0, copied.output
    assert (again / "totals.png").read_bytes() == (out / "totals.png").read_bytes()


@pytest.mark.docker
def test_run_refuses_an_input_it_cannot_mount_and_starts_nothing(tmp_path: Path) -> None:
    require_docker()
    program = tmp_path / "p.py"
    program.write_text("1\n")
    link = tmp_path / "link.csv"
    link.symlink_to(_sales(tmp_path))
    outcome = cli.invoke(app, ["run", str(program), "--input", str(link)])
    assert outcome.exit_code == 2
    assert "input refused (link)" in outcome.output
    sales = str(_sales(tmp_path))
    twice = cli.invoke(app, ["run", str(program), "--input", sales, "--input", sales])
    assert twice.exit_code == 2
    assert "two inputs are named 'sales.csv'" in twice.output


def test_artifacts_commands_refuse_what_is_not_there(tmp_path: Path) -> None:
    store = ["--store", str(tmp_path)]
    missing = cli.invoke(app, ["artifacts", "list", "run_nope", *store])
    assert missing.exit_code == 2
    assert "left no artifacts" in missing.output
    bad_run = cli.invoke(app, ["artifacts", "list", "conv\n1", *store])
    assert bad_run.exit_code == 2
    assert "is not a run id" in bad_run.output
    # Any run id is asked for as a run's: its directories are named so that none is outside.
    other = cli.invoke(app, ["artifacts", "list", "../etc", *store])
    assert other.exit_code == 2
    assert "left no artifacts" in other.output
    for name in ("../../etc/passwd", "/etc/passwd", ".ssh/id"):
        refused = cli.invoke(app, ["artifacts", "get", "run_x", name, *store])
        assert refused.exit_code == 2
        assert "is not an artifact's name" in refused.output


def test_artifacts_get_does_not_follow_a_link_in_the_store(tmp_path: Path) -> None:
    run = tmp_path / "run_x"
    run.mkdir()
    (run / "passwd").symlink_to("/etc/passwd")
    store = ["--store", str(tmp_path)]
    outcome = cli.invoke(app, ["artifacts", "get", "run_x", "passwd", "--to", "-", *store])
    assert outcome.exit_code == 2
    assert "root:" not in outcome.output


@pytest.mark.parametrize("command", ["serve", "chat"])
def test_serve_and_chat_take_the_sandbox_options(command: str) -> None:
    outcome = cli.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    for option in ("--timeout", "--memory", "--keep-state", "--image", "--inputs"):
        assert option in outcome.output, option


def test_the_options_change_the_policy_profile_and_keep_what_they_leave_out() -> None:
    policy = SandboxProfile.model_validate({"timeout_s": 30, "pids_limit": 40})
    assert SandboxOptions().profile(policy) == policy
    chosen = SandboxOptions(timeout=120, memory="2g", image="data").profile(policy)
    assert (chosen.timeout_s, chosen.memory_bytes, chosen.pids_limit) == (120, 2**31, 40)
    assert (chosen.image, chosen.language_mode) == ("data", "full")
    restricted = SandboxProfile(language_mode="restricted")
    # One line (exit 2 on the command line), not the profile's validation error.
    with pytest.raises(RestrictedDataImage, match="full mode only: pass --mode full"):
        profile_options(restricted, image="data")
    with pytest.raises(typer.BadParameter, match="--image must be one of base, data"):
        profile_options(image="gpu")


def test_inputs_dir_offers_its_entries_but_hidden_ones(tmp_path: Path) -> None:
    (tmp_path / "sales.csv").write_text("1")
    (tmp_path / "reports").mkdir()
    (tmp_path / ".git").mkdir()
    files = SandboxOptions(inputs=tmp_path).input_files()
    assert files == {"reports": tmp_path / "reports", "sales.csv": tmp_path / "sales.csv"}
    assert SandboxOptions().input_files() == {}


class ArtifactSurface(EchoSurface):
    """Answers every call with two stored artifacts."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        sink = ArtifactReceiver(root / "run_1-m1-aa", max_files=4, max_bytes=1 << 20)
        sink.receive("table.csv", 0, b"a,b\n1,2\n", end=True)
        sink.receive("chart.png", 0, b"\x89PNG\r\n\x1a\nfake", end=True)
        self.refs = sink.finish()

    async def call(self, name: str, arguments: dict[str, Any]) -> ModelResult:
        listed = [r.model_dump(exclude={"path"}) for r in self.refs]
        return ModelResult(
            is_error=False,
            content=json.dumps({"value": 1, "artifacts": listed}),
            artifacts=self.refs,
        )


@pytest.mark.anyio
async def test_artifacts_are_mcp_resources_the_client_can_read(tmp_path: Path) -> None:
    surface = ArtifactSurface(tmp_path)
    async with Client(build_mcp_server(surface)) as client:
        assert (await client.list_resources()).resources == []
        result = await client.call_tool("billing_invoice_get", {"invoice_id": "inv_1"})
        links = [c for c in result.content if isinstance(c, types.ResourceLink)]
        assert [(link.name, link.mime_type) for link in links] == [
            ("chart.png", "image/png"),
            ("table.csv", "text/csv"),
        ]
        listed = (await client.list_resources()).resources
        assert sorted(str(r.uri) for r in listed) == [
            "airlock://artifacts/run_1-m1-aa/chart.png",
            "airlock://artifacts/run_1-m1-aa/table.csv",
        ]
        table = (await client.read_resource("airlock://artifacts/run_1-m1-aa/table.csv")).contents
        assert [(c.mime_type, getattr(c, "text", None)) for c in table] == [
            ("text/csv", "a,b\n1,2\n")
        ]
        chart = (await client.read_resource("airlock://artifacts/run_1-m1-aa/chart.png")).contents
        [blob] = chart
        assert isinstance(blob, types.BlobResourceContents)
        assert base64.b64decode(blob.blob) == b"\x89PNG\r\n\x1a\nfake"
        # Another run's artifact, or a file changed since, is not served.
        with pytest.raises(MCPError, match="offers the artifacts of its own calls"):
            await client.read_resource("airlock://artifacts/run_2-m1-bb/table.csv")
        Path(surface.refs[1].path).write_bytes(b"changed")
        with pytest.raises(MCPError, match="changed since"):
            await client.read_resource("airlock://artifacts/run_1-m1-aa/table.csv")


def _inventory(tmp_path: Path, sandbox: str, *args: str) -> Any:
    policy = tmp_path / "policy.toml"
    policy.write_text((REPO / POLICY_ARG).read_text() + "\n[sandbox]\n" + sandbox)
    base = ["inventory", "--registry", REGISTRY_REF, "--policy", str(policy)]
    return cli.invoke(app, [*base, *args], env={"DOCKER_HOST": "unix:///nonexistent/x.sock"})


def test_the_inventory_shows_the_data_image_and_the_lock_catches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    lock = tmp_path / "effects.lock"
    locked = _inventory(tmp_path, 'language_mode = "full"\n', "--all", "--lock", str(lock))
    assert locked.exit_code == 0, locked.output
    shown = _inventory(tmp_path, 'image = "data"\n', "--format", "json")
    sandbox = json.loads(shown.output)["sandbox"]
    assert (sandbox["image_kind"], sandbox["language_mode"]) == ("data", "full")
    assert sandbox["image"] == DATA_IMAGE  # AIRLOCK_DATA_IMAGE, or the default tag
    assert "pandas==" in " ".join(sandbox["image_packages"])
    assert sandbox["limits"]["artifact_files"] == 64
    checked = _inventory(tmp_path, 'image = "data"\n', "--check", str(lock))
    assert checked.exit_code == 1
    assert "image_kind base → data" in checked.output
    assert "image_packages + pandas==" in checked.output
    wider = _inventory(
        tmp_path, 'language_mode = "full"\nartifact_limit_files = 100\n', "--check", str(lock)
    )
    assert wider.exit_code == 1
    assert "artifact_files: 64 → 100" in wider.output


@pytest.mark.docker
def test_doctor_checks_the_data_image_and_lists_its_packages() -> None:
    require_docker(DATA_IMAGE)
    outcome = cli.invoke(app, ["doctor", "--image", "data"], env={"COLUMNS": "200"})
    assert outcome.exit_code == 0, outcome.output
    assert "data image packages" in outcome.output
    assert "FAIL" not in outcome.output
    assert "pandas 3" in outcome.output


def test_a_sessions_run_lists_every_programs_artifacts(tmp_path: Path) -> None:
    for program, content in (("run_s-m1-aa", b"first"), ("run_s-m2-aa", b"second")):
        sink = ArtifactReceiver(tmp_path / program, max_files=2, max_bytes=100)
        sink.receive("table.csv", 0, content, end=True)
        sink.finish()
    store = ["--store", str(tmp_path)]
    listed = cli.invoke(app, ["artifacts", "list", "run_s", "--json", *store])
    assert listed.exit_code == 0, listed.output
    uris = [ref["uri"] for ref in json.loads(listed.output)]
    assert uris == [
        "airlock://artifacts/run_s-m1-aa/table.csv",
        "airlock://artifacts/run_s-m2-aa/table.csv",
    ]
    ambiguous = cli.invoke(app, ["artifacts", "get", "run_s", "table.csv", "--to", "-", *store])
    assert ambiguous.exit_code == 2
    assert "is in 2 programs of run 'run_s'" in ambiguous.output
    one = cli.invoke(app, ["artifacts", "get", "run_s-m2-aa", "table.csv", "--to", "-", *store])
    assert (one.exit_code, one.output) == (0, "second")

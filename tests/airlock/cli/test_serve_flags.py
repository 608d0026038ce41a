"""``serve`` and ``chat`` run programs under the policy file's ``[sandbox]`` profile, the one
``airlock inventory`` reports and locks: ``--timeout``, ``--memory`` and ``--image`` may
narrow it for one server, never widen it (a usage error names the flag and the setting)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import Settings, app
from airlock.cli._serve import SandboxOptions, open_harness
from airlock.policies import SandboxProfile, UsageError
from tests.airlock.inventory_registry import POLICY_ARG, REGISTRY_REF, REPO

runner = CliRunner()
GIB = 2**30

# policy [sandbox] table, flags -> None (allowed) or (flag, setting) named by the refusal
CASES: dict[str, tuple[dict[str, object], dict[str, object], tuple[str, str] | None]] = {
    "no flags": ({}, {}, None),
    "a shorter deadline": ({"timeout_s": 30.0}, {"timeout": 5.0}, None),
    "the same deadline": ({"timeout_s": 30.0}, {"timeout": 30.0}, None),
    "a longer deadline": ({}, {"timeout": 300.0}, ("--timeout", "timeout_s")),
    "less memory": ({}, {"memory": "64m"}, None),
    "more memory": ({}, {"memory": "4g"}, ("--memory", "memory_bytes")),
    "the data image on a base policy": ({}, {"image": "data"}, ("--image", "image")),
    "the data image on a data policy": ({"image": "data"}, {"image": "data"}, None),
    "the base image on a data policy": ({"image": "data"}, {"image": "base"}, None),
    "more memory within the data image": (
        {"image": "data", "memory_bytes": GIB},
        {"memory": "2g"},
        ("--memory", "memory_bytes"),
    ),
    "less memory within the data image": ({"image": "data"}, {"memory": "512m"}, None),
    # The data image brings full mode: widening the language even where the memory is set.
    "the data image on a restricted full-memory policy": (
        {"memory_bytes": 4 * GIB},
        {"image": "data"},
        ("--image", "image"),
    ),
    "every flag at once, one widening": (
        {"timeout_s": 60.0, "memory_bytes": GIB},
        {"timeout": 120.0, "memory": "512m"},
        ("--timeout", "timeout_s"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_flags_may_narrow_the_policy_profile_never_widen_it(case: str) -> None:
    table, flags, refused = CASES[case]
    base = SandboxProfile.model_validate(table)
    options = SandboxOptions(**flags)  # type: ignore[arg-type]
    if refused is None:
        chosen = options.checked_profile(base, policy=Path("policy.toml"))
        assert chosen == options.profile(base)
        assert chosen.timeout_s <= base.timeout_s
        assert chosen.memory_bytes <= base.memory_bytes
        return
    with pytest.raises(UsageError) as raised:
        options.checked_profile(base, policy=Path("policy.toml"))
    flag, setting = refused
    message = str(raised.value)
    assert message.startswith(flag), message
    assert f"{setting} in policy.toml" in message
    assert "airlock inventory" in message


def _policy(tmp_path: Path, table: str = "") -> Path:
    policy = tmp_path / "policy.toml"
    policy.write_text((REPO / POLICY_ARG).read_text() + table)
    return policy


@pytest.mark.anyio
async def test_open_harness_refuses_a_widening_flag_before_any_container(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", pool_size=0)
    options = SandboxOptions(image="data", memory="4g", timeout=300)
    with pytest.raises(UsageError, match=r"^--image data"):
        async with open_harness(
            REGISTRY_REF,
            _policy(tmp_path),
            user="alice",
            tenant=None,
            ledger=None,
            settings=settings,
            options=options,
        ):
            pytest.fail("the server must not start")


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--timeout", "300"], "--timeout 300"),
        (["--memory", "4g"], "--memory 4g"),
        (["--image", "data"], "--image data"),
    ],
)
def test_serve_with_a_widening_flag_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], named: str
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", str(tmp_path / "home"))
    # Refused before the engine is asked for anything: none is needed, none is reached.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    monkeypatch.chdir(REPO)
    args = ["serve", "--mcp", "--registry", REGISTRY_REF, "--policy", str(_policy(tmp_path))]
    result = runner.invoke(app, [*args, "--user", "alice", *flags])
    assert result.exit_code == 2, result.output
    assert f"error (usage_error): {named}" in result.output

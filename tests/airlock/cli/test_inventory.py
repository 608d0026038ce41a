"""The command line: ``airlock inventory``, ``program-effects`` and ``audit effects``."""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import Settings, app, default_ledger
from airlock.cli._approvals_serve import serve_approvals
from airlock.cli._inventory import APPROVALS_HOST, APPROVALS_PORT, MCP_HOST, MODEL_KEY
from airlock.cli._serve import open_session
from airlock.frontends import ANTHROPIC_URL
from airlock.tools import AuditEvent, AuditLog, SQLiteAuditStore
from tests.airlock.inventory_registry import POLICY_ARG, REGISTRY_REF, REPO
from tests.audit_events import stored_event
from tests.conftest import IMAGE, require_docker

runner = CliRunner()
BASE = ["inventory", "--registry", REGISTRY_REF, "--policy", POLICY_ARG]


# What else names a connection of the harness: unset, unless a test sets it.
DEPLOYMENT_ENV = (
    "AIRLOCK_DATABASE_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    # libpq's, which move a PostgreSQL database
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGSSLMODE",
    "PGPASSWORD",
    "REQUEST_METHOD",  # with it, urllib ignores HTTP_PROXY
)


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/airlock-test-docker.sock")
    proxies = [name for name in os.environ if name.lower().endswith("_proxy")]
    for name in (*DEPLOYMENT_ENV, *proxies):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(REPO)


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("no_colon_here", "expected one ':'"),
        ("tests.airlock.not_a_module:registry", "cannot import"),
        ("tests.airlock.inventory_registry:missing", "has no 'missing'"),
        ("tests.airlock.inventory_registry:POLICY", "not a tools.Registry"),
    ],
)
def test_a_bad_registry_reference_is_a_usage_error(ref: str, reason: str) -> None:
    result = runner.invoke(app, ["inventory", "--registry", ref, "--policy", POLICY_ARG])
    assert result.exit_code == 2
    assert "error (registry_ref)" in result.output
    assert reason in result.output


def test_a_registry_factory_is_called() -> None:
    ref = "tests.airlock.inventory_registry:build_registry"
    result = runner.invoke(app, ["inventory", "--registry", ref, "--policy", POLICY_ARG])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--principal", "alice", "--all"], "not both"),
        (["--format", "yaml"], "--format 'yaml'"),
        (["--role", "nobody"], "error (unknown_subject)"),
        (["--principal", "_bad id"], "not a valid id"),
        (["--lock", "a.lock", "--check", "b.lock"], "not both"),
        # An empty id is no id: never "every principal" or "the file's tenant".
        (["--principal="], "principal '' in tenant 'default' is not a valid id"),
        (["--principal", ""], "principal '' in tenant 'default' is not a valid id"),
        (["--principal", "alice", "--principal", ""], "principal '' in tenant"),
        (["--tenant="], "in tenant '' is not a valid id"),
        (["--principal", "alice", "--tenant", ""], "principal 'alice' in tenant ''"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], message: str) -> None:
    result = runner.invoke(app, [*BASE, *args])
    assert result.exit_code == 2
    assert message in result.output


# options -> the usage error: --lock writes the lock file's own format and --check prints
# its changes, so --format (even the default's name) goes with neither
FORMAT_CONFLICTS = [
    (["--lock", "{lock}", "--format", "json"], "give --format or --lock, not both"),
    (["--lock", "{lock}", "--format", "table"], "give --format or --lock, not both"),
    (["--check", "{lock}", "--format", "json"], "give --format or --check, not both"),
    (["--check", "{lock}", "--format=markdown"], "give --format or --check, not both"),
    (["--check", "{lock}", "--format", "yaml"], "--format 'yaml' is not one of"),
]


@pytest.mark.parametrize(("args", "message"), FORMAT_CONFLICTS)
def test_format_with_lock_or_check_is_a_usage_error(
    tmp_path: Path, args: list[str], message: str
) -> None:
    lock = tmp_path / "effects.lock"
    if "--check" in args:
        assert runner.invoke(app, [*BASE, "--lock", str(lock)]).exit_code == 0
    before = lock.read_bytes() if lock.exists() else None
    result = runner.invoke(app, [*BASE, *(a.format(lock=lock) for a in args)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert (lock.read_bytes() if lock.exists() else None) == before  # nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == (["effects.lock"] if before else [])


@pytest.mark.parametrize("args", [["--principal", ""], ["--principal", "alice", "--tenant", ""]])
def test_program_effects_refuse_an_empty_id(tmp_path: Path, args: list[str]) -> None:
    result = runner.invoke(app, [*_program(tmp_path, "print(1)\n"), *args])
    assert result.exit_code == 2, result.output
    assert "is not a valid id" in result.output


def test_a_bad_policy_file_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text('version = 1\n[roles.r]\neffects = ["fly(away)"]\n')
    result = runner.invoke(app, ["inventory", "--registry", REGISTRY_REF, "--policy", str(bad)])
    assert result.exit_code == 2
    assert "error (policy_file)" in result.output


def test_one_principal_in_markdown() -> None:
    result = runner.invoke(app, [*BASE, "--principal", "alice", "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert "## principal alice (tenant acme)" in result.output
    assert "## principal bob" not in result.output
    assert "| `billing_refund_create` |" in result.output


def test_an_unnamed_principal_gets_what_star_grants() -> None:
    result = runner.invoke(app, [*BASE, "--principal", "zoe", "--format", "json"])
    subject = json.loads(result.output)["subjects"][0]
    assert subject["name"] == "zoe"
    assert "billing_refund_create" not in {t["name"] for t in subject["tools"]}


# -- the deployment's sandbox profile and the harness's connections --------------------------


def test_the_sandbox_section_shows_the_policy_files_profile(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        (REPO / POLICY_ARG).read_text()
        + '\n[sandbox]\nlanguage_mode = "full"\ntimeout_s = 30\nmemory_bytes = 536870912\n'
        + 'runtime = "runsc"\n'
    )
    args = ["inventory", "--registry", REGISTRY_REF, "--policy", str(policy), "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    sandbox = json.loads(result.output)["sandbox"]
    assert sandbox["language_mode"] == "full"
    assert sandbox["runtime"] == "runsc"
    assert sandbox["limits"]["timeout_s"] == 30
    assert sandbox["limits"]["memory_bytes"] == 536870912
    default = json.loads(runner.invoke(app, [*BASE, "--format", "json"]).output)["sandbox"]
    assert (default["language_mode"], default["limits"]["timeout_s"]) == ("restricted", 10)


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ("memory = 1", "sandbox.memory: unknown key"),
        ('user = "0:0"', "sandbox.user: Value error, the sandbox never runs as root"),
        ("timeout_s = -1", "sandbox.timeout_s: Input should be greater than 0"),
        ('runtime = "kata"', "sandbox.runtime"),
        ('seccomp_allowed = ["ptrace"]', "must not contain ['ptrace']"),
    ],
)
def test_a_bad_sandbox_table_is_a_policy_error(tmp_path: Path, table: str, fragment: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text((REPO / POLICY_ARG).read_text() + f"\n[sandbox]\n{table}\n")
    result = runner.invoke(app, ["inventory", "--registry", REGISTRY_REF, "--policy", str(policy)])
    assert result.exit_code == 2, result.output
    assert "error (policy_file)" in result.output
    assert fragment in result.output


def test_the_harness_section_lists_airlocks_own_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRLOCK_HOME", "/srv/airlock")
    result = runner.invoke(app, [*BASE, "--format", "json"])
    harness = {c["name"]: c for c in json.loads(result.output)["harness"]}
    assert set(harness) == {
        "model provider",
        "mcp listener",
        "docker engine",
        "audit store",
        "ledger",
        "approval page",
    }
    assert harness["model provider"]["target"] == ANTHROPIC_URL
    assert harness["model provider"]["credential"] == MODEL_KEY
    assert harness["docker engine"]["target"] == "unix:///nonexistent/airlock-test-docker.sock"
    assert harness["audit store"]["target"] == "/srv/airlock/audit.db"
    assert harness["ledger"]["target"] == str(default_ledger())
    assert harness["ledger"]["locked_as"] == "$AIRLOCK_HOME/ledger.db"


def test_the_harness_section_names_what_the_commands_use() -> None:
    from airlock.cli._approval_page import LOOPBACK as PAGE_HOST  # the web extra, likewise
    from airlock.frontends.mcp import LOOPBACK  # the mcp extra is part of the dev install

    assert MCP_HOST == LOOPBACK
    assert (PAGE_HOST, _default(serve_approvals, "port")) == (APPROVALS_HOST, APPROVALS_PORT)
    chat = runner.invoke(app, ["chat", "hi", "--registry", REGISTRY_REF, "--policy", POLICY_ARG,
                               "--user", "alice"], env={MODEL_KEY: ""})  # fmt: skip
    assert chat.exit_code == 2
    assert f"set {MODEL_KEY}" in chat.output


def _default(command: Callable[..., object], name: str) -> object:
    return inspect.signature(command).parameters[name].default


def _harness_of(args: list[str]) -> dict[str, dict[str, object]]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return {c["name"]: c for c in json.loads(result.output)["harness"]}


def test_a_remote_database_and_a_span_collector_are_listed_and_fail_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "effects.lock"
    assert runner.invoke(app, [*BASE, "--lock", str(lock)]).exit_code == 0
    monkeypatch.setenv("AIRLOCK_DATABASE_URL", "postgresql://airlock:pw@db.example.net/airlock")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example.net:4318")
    harness = _harness_of(BASE)
    for store in ("audit store", "ledger"):
        assert harness[store]["target"] == "postgresql://db.example.net/airlock"
        assert harness[store]["direction"] == "outbound"
    spans = harness["audit spans"]
    assert spans["target"] == "https://collector.example.net:4318/v1/traces"
    assert "pw" not in json.dumps(harness)
    check = runner.invoke(app, [*BASE, "--check", str(lock)])
    assert check.exit_code == 1, check.output
    assert "new_connection: audit spans: outbound otlp/http" in check.output
    assert "connection_changed: audit store: local sqlite file" in check.output


_DB = "postgresql://airlock@db.example.net/airlock"

# variables set after the lock -> the connection whose change --check reports as growth
MOVES: dict[str, tuple[dict[str, str], dict[str, str], str]] = {
    "a service in the URL": (
        {"AIRLOCK_DATABASE_URL": "postgresql://airlock@/airlock?service=prod"},
        {"AIRLOCK_DATABASE_URL": "postgresql://airlock@/airlock?service=reports"},
        "connection_changed: ledger",
    ),
    "PGHOSTADDR and PGPORT beside the URL's host": (
        {"AIRLOCK_DATABASE_URL": _DB},
        {"AIRLOCK_DATABASE_URL": _DB, "PGHOSTADDR": "127.0.0.1", "PGPORT": "55432"},
        "hostaddr=$PGHOSTADDR(127.0.0.1)&port=$PGPORT(55432)",
    ),
    "PGSERVICE": (
        {"AIRLOCK_DATABASE_URL": "postgresql://airlock@/airlock"},
        {"AIRLOCK_DATABASE_URL": "postgresql://airlock@/airlock", "PGSERVICE": "reports"},
        "connection_changed: audit store",
    ),
    "another service file": (
        {"AIRLOCK_DATABASE_URL": "postgresql:///a?service=prod", "PGSERVICEFILE": "/etc/a"},
        {"AIRLOCK_DATABASE_URL": "postgresql:///a?service=prod", "PGSERVICEFILE": "/tmp/b"},
        "servicefile=$PGSERVICEFILE(/tmp/b)",
    ),
    "PGHOST when the URL names no host": (
        {"AIRLOCK_DATABASE_URL": "postgresql:///airlock"},
        {"AIRLOCK_DATABASE_URL": "postgresql:///airlock", "PGHOST": "db2.example.net"},
        "postgresql://$PGHOST(db2.example.net)/airlock",
    ),
    "an sslmode downgrade": (
        {"AIRLOCK_DATABASE_URL": _DB + "?sslmode=verify-full"},
        {"AIRLOCK_DATABASE_URL": _DB + "?sslmode=disable"},
        "sslmode=disable",
    ),
    "an HTTPS proxy": (
        {},
        {"HTTPS_PROXY": "http://proxy.example:3128"},
        "new_connection: proxy for model provider: outbound http proxy http://proxy.example:3128",
    ),
    "an HTTP proxy for the spans": (
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example.net:4318"},
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example.net:4318",
            "http_proxy": "http://proxy.example:3128",
        },
        "new_connection: proxy for audit spans",
    ),
    "another proxy": (
        {"ALL_PROXY": "http://proxy.example:3128"},
        {"ALL_PROXY": "http://other.example:3128"},
        "connection_changed: proxy for model provider",
    ),
    "the collector's password": (
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example.net:4318"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://op:tok@collector.example.net:4318"},
        "with OTEL_EXPORTER_OTLP_ENDPOINT",
    ),
}


@pytest.mark.parametrize("case", sorted(MOVES))
def test_a_variable_that_moves_a_connection_fails_the_check(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, after, shown = MOVES[case]
    lock = tmp_path / "effects.lock"
    with monkeypatch.context() as locked:
        for name, value in before.items():
            locked.setenv(name, value)
        assert runner.invoke(app, [*BASE, "--lock", str(lock)]).exit_code == 0
        assert runner.invoke(app, [*BASE, "--check", str(lock)]).exit_code == 0
    for name, value in after.items():
        monkeypatch.setenv(name, value)
    check = runner.invoke(app, [*BASE, "--check", str(lock)])
    assert check.exit_code == 1, check.output
    assert shown in check.output
    assert "tok" not in check.output


def test_a_database_url_that_is_not_one_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_DATABASE_URL", "mysql://db.example.net/airlock")
    result = runner.invoke(app, BASE)
    assert result.exit_code == 2
    assert "error (usage_error)" in result.output


# OTLP variables -> where the harness sends spans (None: it sends none)
OTLP: dict[str, tuple[dict[str, str], str | None, str | None]] = {
    "nothing set": ({}, None, None),
    "set empty": ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, None, None),
    "the base endpoint": (
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"},
        "http://127.0.0.1:4318/v1/traces",
        None,
    ),
    "the traces endpoint wins": (
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9999/t",
        },
        "http://127.0.0.1:9999/t",
        None,
    ),
    "headers": (
        {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9999/t",
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer x",
        },
        "http://127.0.0.1:9999/t",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ),
    "traces headers win": (
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
            "OTEL_EXPORTER_OTLP_HEADERS": "a=b",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "c=d",
        },
        "http://127.0.0.1:4318/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ),
}


@pytest.mark.parametrize("case", sorted(OTLP))
def test_audit_spans_are_listed_exactly_when_the_harness_exports_them(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from airlock.harness._otel import spans_from_environment

    environ, endpoint, credential = OTLP[case]
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    spans = _harness_of(BASE).get("audit spans")
    log = AuditLog(SQLiteAuditStore(tmp_path / "audit.db"))
    try:
        exporting = spans_from_environment(log)  # what every harness does with its log
    finally:
        log.close()
    assert exporting == (spans is not None)
    if spans is not None:
        assert (spans["target"], spans["credential"]) == (endpoint, credential)
        assert OTLPSpanExporter()._endpoint == endpoint  # where the exporter posts


# -- program-effects -----------------------------------------------------------------------


def _program(tmp_path: Path, source: str) -> list[str]:
    path = tmp_path / "program.py"
    path.write_text(source)
    return ["program-effects", str(path), "--registry", REGISTRY_REF, "--policy", POLICY_ARG]


def test_program_effects_of_a_resolved_program(tmp_path: Path) -> None:
    args = _program(tmp_path, "get = tools.billing_invoice_get\n[get(invoice_id=i) for i in ids]\n")
    result = runner.invoke(app, [*args, "--principal", "alice", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["tools"] == ["billing_invoice_get"]
    assert report["complete"] is True


def test_program_effects_fail_on_unresolved_calls(tmp_path: Path) -> None:
    result = runner.invoke(app, _program(tmp_path, "getattr(tools, n)()\n"))
    assert result.exit_code == 3
    assert "unresolved at line 1" in result.output
    assert "may reach every effect callable from code" in result.output
    assert "verdict: unresolved" in result.output


@pytest.mark.parametrize(
    ("source", "verdict", "status"),
    [
        ("tools.billing_invoice_get(invoice_id='inv_1')\n", "complete", 0),
        ("tools.billing_refund_create(invoice_id='inv_1', amount_minor=1)\n", "unknown_tools", 1),
        ("class C:\n    t = tools\nC.t.billing_invoice_get(invoice_id='inv_1')\n", "unresolved", 3),
        ("import pickle\npickle.loads(b'')\n", "unresolved", 3),
    ],
)
def test_program_effects_exit_status_says_the_verdict(
    tmp_path: Path, source: str, verdict: str, status: int
) -> None:
    result = runner.invoke(
        app, [*_program(tmp_path, source), "--principal", "alice", "--format", "json"]
    )
    assert result.exit_code == status, result.output
    report = json.loads(result.output)
    assert report["verdict"] == verdict
    assert report["complete"] is (verdict == "complete")


def test_program_effects_report_a_syntax_error(tmp_path: Path) -> None:
    result = runner.invoke(app, _program(tmp_path, "def (:\n"))
    assert result.exit_code == 2
    assert "error (program_syntax)" in result.output


# -- audit effects ---------------------------------------------------------------------------


def _event(run: str, call: str, tool: str, effects: tuple[str, ...], **kw: object) -> AuditEvent:
    fields = {"caller": "code"} | kw
    return stored_event(**fields, run_id=run, call_id=call, tool=tool, effects=effects)


GET_EFFECTS = ("read(billing:invoice/inv_1)", "network(api.billing.example)")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    with AuditLog(SQLiteAuditStore(path)) as log:
        log.record(_event("run_ok", "c1", "billing_invoice_get", GET_EFFECTS))
        log.record(
            _event(
                "run_ok",
                "c2",
                "billing_invoice_list",
                ("read(billing:invoice/*)",),
                stage="authorize",
                decision="deny",
                outcome="error",
                code="denied",
            )
        )
        log.record(_event("run_odd", "c1", "billing_refund_create", ("spend(500 USD)",)))
        log.record(
            _event(
                "run_old",
                "c1",
                "web_page_fetch",
                ("read(web:page/x)",),
                ts=time.time() - 30 * 86400,
            )
        )
    return path


def _audit(db: Path, *args: str) -> list[str]:
    return [
        "audit",
        "effects",
        *args,
        "--registry",
        REGISTRY_REF,
        "--policy",
        POLICY_ARG,
        "--db",
        str(db),
    ]


def test_audit_effects_of_a_run(db: Path) -> None:
    result = runner.invoke(app, _audit(db, "run_ok"))
    assert result.exit_code == 0, result.output
    assert "read(billing:invoice/inv_1)" in result.output
    assert "billing_invoice_list" in result.output  # refused, so reachable but not called
    assert "reachable but not called in this run" in result.output


def test_audit_effects_flag_a_call_outside_the_inventory(db: Path) -> None:
    # A refund from code: the inventory never lets alice's programs reach it.
    result = runner.invoke(app, _audit(db, "run_odd"))
    assert result.exit_code == 1
    assert "tool not reachable from code" in result.output


def test_audit_effects_since_lists_what_was_never_used(db: Path) -> None:
    result = runner.invoke(app, _audit(db, "--since", "7d", "--principal", "alice"))
    assert result.exit_code == 0, result.output
    assert "web_page_fetch" in result.output  # used 30 days ago only
    assert "billing_refund_create" in result.output
    lines = [line for line in result.output.splitlines() if "billing_invoice_get" in line]
    assert not lines  # used in full


@pytest.mark.parametrize("args", [["run_ok", "--since", "7d"], [], ["--since", "seven days"]])
def test_audit_effects_needs_a_run_or_a_period(db: Path, args: list[str]) -> None:
    result = runner.invoke(app, _audit(db, *args))
    assert result.exit_code == 2
    assert "error (usage_error)" in result.output


@pytest.mark.docker
@pytest.mark.anyio
async def test_serve_runs_programs_under_the_profile_the_inventory_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCKER_HOST")  # this one needs the engine
    require_docker()
    policy = tmp_path / "policy.toml"
    policy.write_text(
        (REPO / POLICY_ARG).read_text() + '\n[sandbox]\nlanguage_mode = "full"\ntimeout_s = 7\n'
    )
    shown = runner.invoke(
        app, ["inventory", "--registry", REGISTRY_REF, "--policy", str(policy), "--format", "json"]
    )
    sandbox = json.loads(shown.output)["sandbox"]
    assert (sandbox["language_mode"], sandbox["limits"]["timeout_s"]) == ("full", 7)
    settings = Settings(home=tmp_path / "home", image=IMAGE, pool_size=0)
    async with open_session(
        REGISTRY_REF, policy, user="alice", tenant=None, ledger=None, settings=settings
    ) as session:
        execute_code = session.tools()[0]
        assert "7 s wall clock" in execute_code.description
        # "os" is outside restricted mode's imports: this runs only under the full profile.
        result = await session.call("execute_code", {"code": "import os\nos.getpid() > 0"})
    assert not result.is_error, result.content

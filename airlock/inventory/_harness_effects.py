"""The harness's own connections: what airlock itself reaches, outside any tool.

Tools are not the only way data leaves or enters: the harness sends conversations to a model
provider, accepts MCP clients and the approver's browser, drives the container engine through
its socket (root-equivalent on the host), keeps the audit log and the ledger in files or in a
database server (``AIRLOCK_DATABASE_URL``), and may send every audit record to an
OpenTelemetry collector, each perhaps through an HTTP proxy. :func:`harness_connections`
lists them from what the command line knows (its settings, its environment and the front
ends' endpoints), so a reviewer sees them beside the tools, and the lock file holds each one
in a form that reads the same on every machine: where it is, never a password or a user name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from airlock.harness import DATABASE_ENV, is_postgres
from airlock.inventory._harness_proxies import proxy_connections
from airlock.inventory._model import HarnessConnection

__all__ = ["DEFAULT_DOCKER_HOST", "harness_connections"]

DEFAULT_DOCKER_HOST: Final = "unix:///var/run/docker.sock"
"""Where the Docker client connects when ``DOCKER_HOST`` is not set."""
# Engines reached over the network: locked where they are, as a database server is.
_NETWORK_ENGINES: Final = frozenset({"tcp", "http", "https", "ssh"})


def harness_connections(
    *,
    home: Path,
    model_endpoint: str,
    model_credential: str,
    mcp_host: str,
    docker_host: str | None,
    database: str | None = None,
    spans_endpoint: str | None = None,
    spans_credential: str | None = None,
    spans_variable: str = "OTEL_EXPORTER_OTLP_ENDPOINT",
    approval_page: tuple[str, int] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[HarnessConnection, ...]:
    """The connections of airlock's own commands: the model provider at ``model_endpoint``
    (authenticated with the credential named ``model_credential``), the MCP listener (stdio,
    or HTTP on ``mcp_host``), the container engine at ``docker_host`` (``DOCKER_HOST``; the
    default socket when None), the audit and ledger stores in the database ``database`` names
    (a URL as :func:`airlock.harness.database_url` gives it; SQLite files in ``home`` when
    None), the OTLP collector audit spans go to when ``spans_endpoint`` is given (read from
    the variable ``spans_variable``, with the headers named ``spans_credential``), the approval
    page on ``approval_page`` (host, default port) when given, and the proxy of each outbound
    HTTP endpoint a proxy variable of ``environ`` applies to. ``environ`` is the harness's
    environment (none when None): libpq's ``PG*`` variables move a PostgreSQL database as the
    URL would, and ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` route the
    model's, the collector's and a TCP engine's requests."""
    environ = environ or {}
    engine = docker_host or DEFAULT_DOCKER_HOST
    optional: list[HarnessConnection] = []
    http = [("model provider", model_endpoint)]
    if spans_endpoint is not None:
        optional.append(_spans(spans_endpoint, spans_credential, spans_variable))
        http.append(("audit spans", spans_endpoint))
    if approval_page is not None:
        optional.append(_approval_page(*approval_page))
    if engine.startswith(("tcp://", "http://", "https://")):
        http.append(("docker engine", _engine_url(engine, environ)))
    optional.extend(proxy_connections(http, environ))
    return (
        HarnessConnection(
            name="model provider",
            direction="outbound",
            kind="https",
            target=model_endpoint,
            locked_as=model_endpoint,
            credential=model_credential,
            used_by="made by airlock chat with a live model (--replay makes none)",
            note=(
                "the conversation, the tool definitions and every result shown to the model "
                "leave the host here"
            ),
        ),
        HarnessConnection(
            name="mcp listener",
            direction="inbound",
            kind="mcp",
            target=f"stdio; with --http PORT: http://{mcp_host}:PORT/mcp",
            locked_as=f"stdio; with --http PORT: http://{mcp_host}:PORT/mcp",
            credential=None,
            used_by="opened by airlock serve --mcp",
            note=(
                "a client acts as the principal the server was started for; HTTP listens on "
                "loopback only"
            ),
        ),
        HarnessConnection(
            name="docker engine",
            direction="local" if engine.startswith("unix://") else "outbound",
            kind="unix socket" if engine.startswith("unix://") else "docker api",
            target=engine,
            locked_as=_engine_locked(engine),
            credential=None,
            used_by="every command that runs programs (run, serve, chat, doctor)",
            note=(
                "root-equivalent on the engine's host: the harness starts and removes sandbox "
                "containers through it; programs never see it"
            ),
        ),
        _store(
            "audit store",
            "audit.db",
            home,
            database,
            "written by serve, chat, run and a Harness of your own (the default audit log), "
            "read by airlock audit",
            environ,
        ),
        _store(
            "ledger",
            "ledger.db",
            home,
            database,
            "written by the write path (previews, approvals, receipts), read by airlock "
            "approvals, receipts and reconcile",
            environ,
        ),
        *optional,
    )


def _store(
    name: str,
    file: str,
    home: Path,
    database: str | None,
    used_by: str,
    environ: Mapping[str, str],
) -> HarnessConnection:
    key = name == "audit store"
    if is_postgres(database):
        assert database is not None
        where, credential = _postgres(database, environ)
        return HarnessConnection(
            name=name,
            direction="outbound",
            kind="postgresql",
            target=where,
            locked_as=where,
            credential=credential,
            used_by=f"{used_by}; shared by every harness process that names this database",
            note="readable by whoever the database server lets read it; never mounted into a "
            "sandbox"
            + (
                "; its chain key is $AIRLOCK_HOME/audit.key (or AIRLOCK_AUDIT_KEY_FILE)"
                if key
                else ""
            ),
        )
    # sqlite:///FOLDER names the folder; no URL: $AIRLOCK_HOME.
    folder = home if database is None else Path(database.removeprefix("sqlite://"))
    return HarnessConnection(
        name=name,
        direction="local",
        kind="sqlite file",
        target=str(folder / file),
        locked_as=f"$AIRLOCK_HOME/{file}" if database is None else str(folder / file),
        credential=None,
        used_by=used_by,
        note=f"readable by whoever can read {'$AIRLOCK_HOME' if database is None else folder}; "
        "never mounted into a sandbox"
        + ("; its chain key is audit.db.key beside it" if key else ""),
    )


# The query parameters that say where libpq connects and how it protects the connection; the
# others (user, password, options, ...) are left out: a user name or a password is never listed.
_WHERE: Final = ("host", "hostaddr", "port", "dbname", "service", "servicefile", "sslmode")
# libpq's variables for a parameter the URL leaves out (host: see _postgres); the service
# file is read only for a service.
_LIBPQ_ENV: Final = (
    ("hostaddr", "PGHOSTADDR"),
    ("port", "PGPORT"),
    ("service", "PGSERVICE"),
    ("servicefile", "PGSERVICEFILE"),
    ("sslmode", "PGSSLMODE"),
)


def _postgres(url: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """Where a PostgreSQL URL connects under libpq's variables in ``environ``, without its user
    and password, and the name of the credential it carries (the URL's variable, when the URL
    holds a password; else ``PGPASSWORD`` when set). A variable libpq reads for a parameter the
    URL leaves out is shown as ``$NAME(value)``, so a change of it changes what is locked."""
    parts = urlsplit(url)
    user_info, _, hosts = parts.netloc.rpartition("@")
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = {k for k, _ in query}
    where = [f"{k}={v}" for k, v in query if k in _WHERE]
    hosts = hosts.lower()  # names are case-blind: DB.Example.NET is no new server
    named = [_split_host(h) for h in hosts.split(",")]
    if any(port for _, port in named):
        given.add("port")
    if not any(host for host, _ in named) and "host" not in given and "hostaddr" not in given:
        # libpq's: another machine as likely as the local socket
        hosts = _variable("PGHOST", environ) + hosts
    service = "service" in given or bool(environ.get("PGSERVICE"))
    for parameter, variable in _LIBPQ_ENV:
        read = parameter != "servicefile" or service
        if read and parameter not in given and environ.get(variable):
            where.append(f"{parameter}={_variable(variable, environ)}")
    text = f"postgresql://{hosts}{parts.path}" + ("?" + "&".join(where) if where else "")
    if ":" in user_info or "password" in given:
        return text, DATABASE_ENV
    return text, "PGPASSWORD" if environ.get("PGPASSWORD") else None


def _split_host(entry: str) -> tuple[str, str]:
    """``host:port`` (``[v6]:port``) of a URL's host list, as (host, port)."""
    if entry.startswith("["):
        host, _, rest = entry.partition("]")
        return host + "]", rest.removeprefix(":")
    host, _, port = entry.partition(":")
    return host, port


def _variable(name: str, environ: Mapping[str, str]) -> str:
    value = environ.get(name)
    return f"${name}({value})" if value else f"${name}"


def _spans(endpoint: str, credential: str | None, variable: str) -> HarnessConnection:
    parts = urlsplit(endpoint)
    user_info, _, host = parts.netloc.rpartition("@")
    where = parts._replace(netloc=host, query="", fragment="")
    # The exporter sends the endpoint's user and password as basic authentication.
    sent = [name for name in (credential, variable if user_info else None) if name]
    return HarnessConnection(
        name="audit spans",
        direction="outbound",
        kind="otlp/http",
        target=where.geturl(),
        locked_as=where.geturl(),
        credential=", ".join(sent) or None,
        used_by="sent by serve, chat, run and a Harness of your own with every audit record "
        "stored, while OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set",
        note="each record leaves the host as a span: run and call ids, principal, tenant, "
        "tool, effects, outcome, approver and the arguments' hash (never their values)",
    )


def _approval_page(host: str, port: int) -> HarnessConnection:
    where = f"http://{host}:{port}; with --port PORT: http://{host}:PORT"
    return HarnessConnection(
        name="approval page",
        direction="inbound",
        kind="http",
        target=where,
        locked_as=where,
        credential=None,
        used_by="opened by airlock approvals serve",
        note="whoever holds the link it prints (its token; --no-token: anyone on this "
        "machine) approves or denies writes; loopback only",
    )


def _engine_locked(engine: str) -> str:
    """What the lock holds for the engine at ``engine``: one over the network (``tcp://``,
    ``http(s)://``, ``ssh://``) by its scheme, host and port, as a database server is (moving
    it to another machine is growth), never its user; a local socket by the variable that
    names it, which reads the same on every machine."""
    scheme, sep, rest = engine.partition("://")
    if not sep or scheme.lower() not in _NETWORK_ENGINES:
        return f"DOCKER_HOST, default {DEFAULT_DOCKER_HOST}"
    where = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return f"{scheme.lower()}://{where.rpartition('@')[2].lower()}"


def _engine_url(engine: str, environ: Mapping[str, str]) -> str:
    """The URL the Docker client requests for an engine on ``tcp://`` (TLS when
    ``DOCKER_TLS_VERIFY`` or ``DOCKER_CERT_PATH`` is set, as ``docker.from_env`` reads them)."""
    scheme, _, where = engine.partition("://")
    tls = scheme == "https" or bool(environ.get("DOCKER_CERT_PATH"))
    tls = tls or environ.get("DOCKER_TLS_VERIFY") not in (None, "")
    return f"{'https' if tls else 'http'}://{where}"

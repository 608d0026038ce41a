-- The audit store: events numbered 1, 2, 3, ... with their hash chain, the effect index
-- that `airlock audit find` searches, program texts by hash, and the head of the chain.
-- Text that is searched by range or ordered compares byte by byte (COLLATE "C").
CREATE TABLE audit_events (
    id BIGINT PRIMARY KEY,
    ts DOUBLE PRECISION NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    call_id TEXT COLLATE "C" NOT NULL,
    caller TEXT COLLATE "C" NOT NULL,
    tool TEXT COLLATE "C" NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL,
    tenant_id TEXT COLLATE "C" NOT NULL,
    args_hash TEXT COLLATE "C" NOT NULL,
    stage TEXT NOT NULL,
    decision TEXT NOT NULL,
    rule TEXT NOT NULL,
    outcome TEXT NOT NULL,
    code TEXT,
    duration_s DOUBLE PRECISION NOT NULL,
    effects TEXT NOT NULL,
    detail TEXT,
    final INTEGER NOT NULL,
    approver TEXT,
    exercised INTEGER NOT NULL,
    chain BYTEA NOT NULL
);
CREATE INDEX audit_events_run ON audit_events (run_id, id);
CREATE INDEX audit_events_tool ON audit_events (tool, id);
CREATE INDEX audit_events_ts ON audit_events (ts);

CREATE TABLE audit_effects (
    event_id BIGINT NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    target TEXT COLLATE "C" NOT NULL,
    prefix TEXT COLLATE "C",
    PRIMARY KEY (event_id, kind, target)
);
CREATE INDEX audit_effects_target ON audit_effects (target, event_id) WHERE prefix IS NULL;
CREATE INDEX audit_effects_prefix ON audit_effects (prefix, event_id) WHERE prefix IS NOT NULL;
CREATE INDEX audit_effects_kind ON audit_effects (kind, event_id);

CREATE TABLE audit_programs (
    hash TEXT COLLATE "C" PRIMARY KEY,
    text BYTEA NOT NULL
);

CREATE TABLE audit_head (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    records BIGINT NOT NULL,
    chain BYTEA NOT NULL,
    mac BYTEA NOT NULL
);

-- A MAC of a fixed text under the chain key that first wrote here: a process holding
-- another key is refused before it writes a record.
CREATE TABLE audit_key (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    mac BYTEA NOT NULL
);

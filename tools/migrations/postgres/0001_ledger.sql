-- The ledger: previews, their approvals, receipts and the history of every step.
-- Identifiers and keys compare byte by byte (COLLATE "C"), whatever the database's locale,
-- so ordering and ranges agree with SQLite's.
CREATE TABLE previews (
    id TEXT COLLATE "C" PRIMARY KEY,
    run_id TEXT COLLATE "C" NOT NULL,
    tool TEXT COLLATE "C" NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL,
    tenant_id TEXT COLLATE "C" NOT NULL,
    principal TEXT NOT NULL,
    effect TEXT NOT NULL,
    effects TEXT NOT NULL,
    summary TEXT NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    rule TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    expires DOUBLE PRECISION NOT NULL,
    state TEXT COLLATE "C" NOT NULL CHECK (
        state IN ('prepared', 'approved', 'denied', 'sending', 'committed', 'failed', 'unknown')
    ),
    updated DOUBLE PRECISION NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    lease_until DOUBLE PRECISION,
    error TEXT
);
-- At most one live preview per idempotency key (the states that hold the key).
CREATE UNIQUE INDEX previews_live_key ON previews (key)
    WHERE state IN ('approved', 'committed', 'prepared', 'sending', 'unknown');
CREATE INDEX previews_state ON previews (state, created);
CREATE INDEX previews_run ON previews (run_id, created);

CREATE TABLE approvals (
    preview_id TEXT COLLATE "C" PRIMARY KEY REFERENCES previews (id),
    fingerprint TEXT COLLATE "C" NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('policy', 'person')),
    approver TEXT NOT NULL,
    rule TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    reason TEXT NOT NULL,
    consumed_at DOUBLE PRECISION
);

-- At most one receipt per key and per preview: written once.
CREATE TABLE receipts (
    key TEXT COLLATE "C" PRIMARY KEY,
    preview_id TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES previews (id),
    tool TEXT COLLATE "C" NOT NULL,
    data TEXT NOT NULL,
    stored_at DOUBLE PRECISION NOT NULL,
    resolved_by TEXT NOT NULL CHECK (resolved_by IN ('send', 'resend', 'query'))
);
CREATE INDEX receipts_stored ON receipts (stored_at);

CREATE TABLE step_events (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    preview_id TEXT COLLATE "C" NOT NULL REFERENCES previews (id),
    at DOUBLE PRECISION NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    actor TEXT NOT NULL,
    how TEXT NOT NULL
);
CREATE INDEX step_events_preview ON step_events (preview_id, id);

-- Batches: the ordered preview ids one program proposed, written once.
CREATE TABLE batches (
    id TEXT COLLATE "C" PRIMARY KEY,
    run_id TEXT COLLATE "C" NOT NULL,
    principal TEXT NOT NULL,
    items TEXT NOT NULL,
    fingerprint TEXT COLLATE "C" NOT NULL,
    created DOUBLE PRECISION NOT NULL
);
CREATE INDEX batches_run ON batches (run_id, created);

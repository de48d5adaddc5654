-- Sessions: one row per conversation, with where it stands and who drives it.
CREATE TABLE sessions (
    id             TEXT    PRIMARY KEY,
    created_ms     INTEGER NOT NULL,
    updated_ms     INTEGER NOT NULL,
    origin         TEXT    NOT NULL,
    parent         TEXT,
    title          TEXT    NOT NULL DEFAULT '',
    state          TEXT    NOT NULL,
    turns          INTEGER NOT NULL DEFAULT 0,
    messages       INTEGER NOT NULL DEFAULT 0,
    seq            INTEGER NOT NULL DEFAULT 0,
    settings       TEXT    NOT NULL DEFAULT '{}',
    lease_holder   TEXT,
    lease_until_ms INTEGER
);
CREATE INDEX sessions_updated ON sessions (updated_ms);

-- The append-only log of a session's transitions: the cause, the messages appended since
-- the previous transition, and everything else of the conversation (the tail).
CREATE TABLE transitions (
    session       TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    at_ms         INTEGER NOT NULL,
    cause         TEXT    NOT NULL,
    first_message INTEGER NOT NULL,
    messages      TEXT    NOT NULL,
    tail          TEXT    NOT NULL,
    PRIMARY KEY (session, seq)
);

-- The whole conversation as of one transition, so loading reads one snapshot and the few
-- transitions after it.
CREATE TABLE snapshots (
    session      TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    conversation TEXT    NOT NULL,
    PRIMARY KEY (session, seq)
);

-- The audit log: filterable columns and the whole record as JSON.
CREATE TABLE audit (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms   INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    origin  TEXT    NOT NULL,
    session TEXT,
    tool    TEXT,
    plugin  TEXT,
    outcome TEXT,
    record  TEXT    NOT NULL
);
CREATE INDEX audit_at ON audit (at_ms);
CREATE INDEX audit_session ON audit (session, id);
CREATE INDEX audit_tool ON audit (tool, id);

-- Append-only: the host never changes or removes a record, and neither can anything else
-- that goes through SQL without dropping these triggers first.
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;

-- Sessions: one row per conversation, with where it stands and who drives it.
CREATE TABLE sessions (
    id             TEXT    PRIMARY KEY,
    created_ms     BIGINT  NOT NULL,
    updated_ms     BIGINT  NOT NULL,
    origin         TEXT    NOT NULL,
    parent         TEXT,
    title          TEXT    NOT NULL DEFAULT '',
    state          TEXT    NOT NULL,
    turns          BIGINT  NOT NULL DEFAULT 0,
    messages       BIGINT  NOT NULL DEFAULT 0,
    seq            BIGINT  NOT NULL DEFAULT 0,
    settings       TEXT    NOT NULL DEFAULT '{}',
    lease_holder   TEXT,
    lease_until_ms BIGINT
);
CREATE INDEX sessions_updated ON sessions (updated_ms);

-- The append-only log of a session's transitions: the cause, the messages appended since
-- the previous transition, and everything else of the conversation (the tail).
CREATE TABLE transitions (
    session       TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq           BIGINT  NOT NULL,
    at_ms         BIGINT  NOT NULL,
    cause         TEXT    NOT NULL,
    first_message BIGINT  NOT NULL,
    messages      TEXT    NOT NULL,
    tail          TEXT    NOT NULL,
    PRIMARY KEY (session, seq)
);

-- The whole conversation as of one transition, so loading reads one snapshot and the few
-- transitions after it.
CREATE TABLE snapshots (
    session      TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq          BIGINT  NOT NULL,
    conversation TEXT    NOT NULL,
    PRIMARY KEY (session, seq)
);

-- The audit log: filterable columns and the whole record as JSON.
CREATE TABLE audit (
    id      BIGSERIAL PRIMARY KEY,
    at_ms   BIGINT    NOT NULL,
    kind    TEXT      NOT NULL,
    origin  TEXT      NOT NULL,
    session TEXT,
    tool    TEXT,
    plugin  TEXT,
    outcome TEXT,
    record  TEXT      NOT NULL
);
CREATE INDEX audit_at ON audit (at_ms);
CREATE INDEX audit_session ON audit (session, id);
CREATE INDEX audit_tool ON audit (tool, id);

-- Append-only: the host never changes or removes a record, and neither can anything else
-- that goes through SQL without dropping this trigger first.
CREATE FUNCTION cordon_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END
$$;
CREATE TRIGGER audit_no_change BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION cordon_audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION cordon_audit_append_only();

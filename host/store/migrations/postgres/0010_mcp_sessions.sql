-- MCP sessions opened over HTTP, so that a client's next request finds its session on
-- whichever host it reaches: the token that opened it (none until the opening host records
-- it: such a session is nobody's) and what the client said when it initialised.
CREATE TABLE mcp_sessions (
    id          TEXT    PRIMARY KEY,
    token       TEXT,
    state       TEXT    NOT NULL,
    opened_ms   BIGINT  NOT NULL
);
CREATE INDEX mcp_sessions_opened ON mcp_sessions (opened_ms);
-- The labels (Rule of Two) a client over HTTP holds, by its token and name: what its model
-- was given results of, on any host, each kept a day from when it was last recorded.
CREATE TABLE mcp_labels (
    token       TEXT    NOT NULL,
    client      TEXT    NOT NULL,
    label       TEXT    NOT NULL,
    tool        TEXT    NOT NULL,
    grant_text  TEXT    NOT NULL,
    at_ms       BIGINT  NOT NULL,
    PRIMARY KEY (token, client, label, tool, grant_text)
);
CREATE INDEX mcp_labels_at ON mcp_labels (at_ms);

-- Tool results too large to hold in a conversation (a plugin wrote them as it went, up to the
-- output limit), kept beside it in parts of about 1 MiB that end at line ends, so that a page
-- of one reads only the parts it needs. `id` is Cordon's id of the call in the session. The
-- body is bytes, not text: PostgreSQL's text takes no NUL, which a tool's text may hold.
CREATE TABLE kept_results (
    session     TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    part        BIGINT  NOT NULL,
    byte_offset BIGINT  NOT NULL,
    first_line  BIGINT  NOT NULL,
    starts_line BOOLEAN NOT NULL,
    body        BYTEA   NOT NULL,
    PRIMARY KEY (session, id, part)
);
CREATE INDEX kept_results_offsets ON kept_results (session, id, byte_offset);
CREATE INDEX kept_results_lines ON kept_results (session, id, first_line);

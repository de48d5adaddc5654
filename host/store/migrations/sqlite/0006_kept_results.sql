-- Tool results too large to hold in a conversation (a plugin wrote them as it went, up to the
-- output limit), kept beside it in parts of about 1 MiB that end at line ends, so that a page
-- of one reads only the parts it needs. `id` is Cordon's id of the call in the session.
CREATE TABLE kept_results (
    session     TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    part        INTEGER NOT NULL,
    byte_offset INTEGER NOT NULL,
    first_line  INTEGER NOT NULL,
    starts_line INTEGER NOT NULL,
    body        BLOB    NOT NULL,
    PRIMARY KEY (session, id, part)
);
CREATE INDEX kept_results_offsets ON kept_results (session, id, byte_offset);
CREATE INDEX kept_results_lines ON kept_results (session, id, first_line);

-- Who created a session through a served door (the bearer token's name; NULL at the terminal):
-- the gateway continues a session, and honours X-Cordon-Session, only for that token.
ALTER TABLE sessions ADD COLUMN created_by TEXT;

-- A history may be recorded for several sessions (two clients sending the same opening to a
-- deterministic model): each is kept, none overwrites another, and the gateway continues one
-- only when exactly one of them is its requester's and still ends at that history. The
-- digests now cover the requester too, so the entries of the earlier scheme match nothing.
DROP TABLE gateway_histories;
CREATE TABLE gateway_histories (
    digest  TEXT    NOT NULL,
    session TEXT    NOT NULL,
    at_ms   BIGINT  NOT NULL,
    PRIMARY KEY (digest, session)
);
CREATE INDEX gateway_histories_session ON gateway_histories (session);

-- Which session a history sent to the OpenAI-compatible gateway continues: a client sends the
-- whole conversation with every request, and the digest of what it will send next (model and
-- messages) names the session its next message belongs to. Kept here, not in the host's
-- memory, so a restarted host, or another host on the same store, continues the same session.
CREATE TABLE gateway_histories (
    digest  TEXT   PRIMARY KEY,
    session TEXT   NOT NULL,
    at_ms   BIGINT NOT NULL
);
CREATE INDEX gateway_histories_session ON gateway_histories (session);

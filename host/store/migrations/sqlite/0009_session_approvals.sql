-- Questions of sessions' turns wait here too, so that whichever host a person's answer
-- reaches writes it once, and the host driving the turn reads it: the session and the call,
-- and the token that created the session (who may see the question; `token` is whose turn
-- caused the call). Rows of MCP clients' calls leave the three empty.
ALTER TABLE approvals ADD COLUMN session TEXT;
ALTER TABLE approvals ADD COLUMN call_id TEXT;
ALTER TABLE approvals ADD COLUMN owner TEXT;
-- When the turn that asked received the answer: an answer given while no turn waited (its host
-- died, or the store was away) is taken by the turn that asks about the same call again.
ALTER TABLE approvals ADD COLUMN taken_ms BIGINT;
CREATE INDEX approvals_of_calls ON approvals (session, call_id);

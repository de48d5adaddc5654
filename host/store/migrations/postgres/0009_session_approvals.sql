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
-- Whoever answers (any host, `cordon approve`), the hosts waiting hear of it at once on the
-- channel `cordon_approvals`, the question's id as payload, when the answer commits.
CREATE FUNCTION cordon_approval_answered() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('cordon_approvals', NEW.id);
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER approvals_answered AFTER UPDATE OF answer ON approvals
    FOR EACH ROW WHEN (OLD.answer IS NULL AND NEW.answer IS NOT NULL)
    EXECUTE FUNCTION cordon_approval_answered();

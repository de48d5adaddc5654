-- Who asked for the turn a record's call came from (the token's name) and who decided whether
-- it ran, as columns: the audit API shows a token the records of its own turns, and
-- `cordon audit` filters by either. Records written before are filled in from their JSON;
-- the append-only trigger is set aside for exactly that, in this migration's transaction.
ALTER TABLE audit DISABLE TRIGGER audit_no_change;
ALTER TABLE audit ADD COLUMN requested_by TEXT;
ALTER TABLE audit ADD COLUMN decided_by TEXT;
UPDATE audit SET requested_by = record::jsonb #>> '{requested_by,token}',
                 decided_by = record::jsonb ->> 'decided_by'
 WHERE kind = 'tool_call';
ALTER TABLE audit ENABLE TRIGGER audit_no_change;
CREATE INDEX audit_requested_by ON audit (requested_by, id);

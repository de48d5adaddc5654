-- Who asked for the turn a record's call came from (the token's name) and who decided whether
-- it ran, as columns: the audit API shows a token the records of its own turns, and
-- `cordon audit` filters by either. Records written before are filled in from their JSON;
-- the append-only trigger is set aside for exactly that and put back.
DROP TRIGGER audit_no_update;
ALTER TABLE audit ADD COLUMN requested_by TEXT;
ALTER TABLE audit ADD COLUMN decided_by TEXT;
UPDATE audit SET requested_by = json_extract(record, '$.requested_by.token'),
                 decided_by = json_extract(record, '$.decided_by')
 WHERE kind = 'tool_call';
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;
CREATE INDEX audit_requested_by ON audit (requested_by, id);

-- Who asked for the turn a record's call came from (the token's name) and who decided whether
-- it ran, as columns: the audit API shows a token the records of its own turns, and
-- `cordon audit` filters by either. Records written before are filled in from their JSON;
-- the append-only trigger is set aside for exactly that, in this migration's transaction.
ALTER TABLE audit DISABLE TRIGGER audit_no_change;
ALTER TABLE audit ADD COLUMN requested_by TEXT;
ALTER TABLE audit ADD COLUMN decided_by TEXT;
-- PostgreSQL's JSON functions refuse a `\u0000` escape anywhere in a document (a NUL a model
-- put in its arguments is kept so), and one such record would stop the migration and every
-- host with it. Records without one are filled in at once; the few with one are read as text:
-- both fields are written by Cordon, before any text from a model, and a key in quotes cannot
-- come from inside a string, whose quotes are escaped.
UPDATE audit SET requested_by = record::jsonb #>> '{requested_by,token}',
                 decided_by = record::jsonb ->> 'decided_by'
 WHERE kind = 'tool_call' AND strpos(record, '\u0000') = 0;
DO $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT id, record FROM audit
              WHERE kind = 'tool_call' AND strpos(record, '\u0000') > 0 LOOP
        UPDATE audit
           SET requested_by = substring(r.record from '"requested_by":\{"token":"([A-Za-z0-9._-]*)"'),
               decided_by = substring(r.record from '"decided_by":"((?:[^"\\]|\\.)*)"')
         WHERE id = r.id;
    END LOOP;
END
$$;
ALTER TABLE audit ENABLE TRIGGER audit_no_change;
CREATE INDEX audit_requested_by ON audit (requested_by, id);

-- qc_invoice_guard: the current definition, applied (CREATE OR REPLACE) after every migration,
-- with the triggers that call it (re-created in the same transaction).
--
-- Issued invoices and credit notes are immutable (docs/billing.md, "Invoices"; migration 0019):
-- an issued row of invoices is never updated or deleted, the lines of an issued document are
-- never inserted, updated or deleted, and neither table is truncated. A correction is a credit
-- note. Issuing (a draft set to 'issued') checks that the total is the sum of the lines.
CREATE OR REPLACE FUNCTION qc_invoice_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION 'issued invoices are kept: % cannot be truncated', TG_TABLE_NAME
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF TG_TABLE_NAME = 'invoices' THEN
        IF OLD.status = 'issued' THEN
            RAISE EXCEPTION 'invoice % is issued and cannot be changed; issue a credit note', OLD.number
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        IF TG_OP = 'UPDATE' AND NEW.status = 'issued' AND NEW.total_cents <>
           (SELECT coalesce(sum(amount_cents), 0) FROM invoice_lines WHERE invoice_id = NEW.id) THEN
            RAISE EXCEPTION 'invoice % total is not the sum of its lines', NEW.number
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    ELSIF EXISTS (SELECT 1 FROM invoices i
                  WHERE i.status = 'issued'
                    AND i.id IN (CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE OLD.invoice_id END,
                                 CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE NEW.invoice_id END)) THEN
        RAISE EXCEPTION 'the lines of an issued invoice cannot be changed; issue a credit note'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END;
$$;

DROP TRIGGER IF EXISTS invoices_immutable ON invoices;
CREATE TRIGGER invoices_immutable BEFORE UPDATE OR DELETE ON invoices
    FOR EACH ROW EXECUTE FUNCTION qc_invoice_guard();
DROP TRIGGER IF EXISTS invoice_lines_immutable ON invoice_lines;
CREATE TRIGGER invoice_lines_immutable BEFORE INSERT OR UPDATE OR DELETE ON invoice_lines
    FOR EACH ROW EXECUTE FUNCTION qc_invoice_guard();
DROP TRIGGER IF EXISTS invoices_no_truncate ON invoices;
CREATE TRIGGER invoices_no_truncate BEFORE TRUNCATE ON invoices
    FOR EACH STATEMENT EXECUTE FUNCTION qc_invoice_guard();
DROP TRIGGER IF EXISTS invoice_lines_no_truncate ON invoice_lines;
CREATE TRIGGER invoice_lines_no_truncate BEFORE TRUNCATE ON invoice_lines
    FOR EACH STATEMENT EXECUTE FUNCTION qc_invoice_guard();

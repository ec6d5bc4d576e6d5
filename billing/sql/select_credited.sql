-- What credit notes already took back from an invoice (a negative number of cents).
SELECT coalesce(sum(total_cents), 0)::bigint AS credited FROM invoices WHERE credited_invoice_id = %(invoice_id)s

SELECT i.id, i.number, i.kind, i.organisation_id, i.organisation_name, i.tier, i.period_start, i.period_end,
i.currency, i.total_cents, i.reason, i.issued_at, c.number AS credited_number
FROM invoices i LEFT JOIN invoices c ON c.id = i.credited_invoice_id
WHERE i.organisation_id = %(organisation_id)s AND i.period_start = %(period_start)s AND i.kind = 'invoice'

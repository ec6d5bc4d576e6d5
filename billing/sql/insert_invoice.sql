-- A draft; for an invoice, nothing when the organisation's month has one already.
INSERT INTO invoices (id, number, kind, series, year, sequence, organisation_id, organisation_name, tier,
                      period_start, period_end, currency, total_cents, credited_invoice_id, reason)
VALUES (%(id)s, %(number)s, %(kind)s, %(series)s, %(year)s, %(sequence)s, %(organisation_id)s,
        %(organisation_name)s, %(tier)s, %(period_start)s, %(period_end)s, %(currency)s, %(total_cents)s,
        %(credited_invoice_id)s, %(reason)s)
ON CONFLICT (organisation_id, period_start) WHERE kind = 'invoice' DO NOTHING
RETURNING id

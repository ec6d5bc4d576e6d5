"""SQL of invoices and credit notes (migration 0019), named. Used by :mod:`billing.invoicing`."""

# The organisations a month is invoiced to: those of a billed tier that existed before the month
# ended or have usage in it. ``%(organisation_id)s`` narrows it to one (NULL: all).
SELECT_BILLED_ORGANISATIONS = """
SELECT o.id, o.name, o.tier
FROM organisations o
WHERE o.tier = ANY(%(tiers)s::text[])
  AND (%(organisation_id)s::text IS NULL OR o.id = %(organisation_id)s::text)
  AND (o.created_at < %(until)s
       OR EXISTS (SELECT 1 FROM usage_hourly u JOIN environments e ON e.id = u.environment_id
                  WHERE e.organisation_id = o.id AND u.hour >= %(since)s AND u.hour < %(until)s))
ORDER BY o.id
"""

# One organisation's month per environment, with the same sums and storage rule as the monthly
# rollup (spark_pipelines.usage_aggregation): each hour's average stored bytes, as byte-hours.
SELECT_ENVIRONMENT_MONTH = """
SELECT p.id AS project_id, p.name AS project_name, e.id AS environment_id, e.name AS environment_name,
       sum(u.messages_in)::bigint AS messages_in, sum(u.messages_out)::bigint AS messages_out,
       sum(u.bytes_in)::bigint AS bytes_in, sum(u.bytes_out)::bigint AS bytes_out,
       sum(u.publish_requests + u.consume_requests + u.admin_requests)::bigint AS requests,
       coalesce(sum(u.storage_bytes_sum::float8 / nullif(u.storage_samples, 0)), 0) AS storage_byte_hours
FROM usage_hourly u
JOIN environments e ON e.id = u.environment_id
JOIN projects p ON p.id = e.project_id
WHERE e.organisation_id = %(organisation_id)s AND u.hour >= %(since)s AND u.hour < %(until)s
GROUP BY p.id, p.name, e.id, e.name
HAVING sum(u.messages_in + u.messages_out + u.bytes_in + u.bytes_out + u.publish_requests
           + u.consume_requests + u.admin_requests + u.storage_bytes_sum) > 0
ORDER BY p.name, e.name
"""

# The projects of an organisation whose month the rollup has not computed since their last usage
# change: the invoice waits for them (the rollup's row must be at least as recent as every hourly
# row it covers, so the invoice's lines add up to it).
SELECT_ROLLUP_PENDING = """
SELECT e.project_id
FROM usage_hourly u
JOIN environments e ON e.id = u.environment_id
LEFT JOIN usage_monthly m ON m.project_id = e.project_id AND m.month = %(since)s::date
WHERE e.organisation_id = %(organisation_id)s AND u.hour >= %(since)s AND u.hour < %(until)s
GROUP BY e.project_id, m.computed_at
HAVING m.computed_at IS NULL OR m.computed_at < max(u.updated_at)
ORDER BY e.project_id
"""

# The next number of a series and year. The row stays locked until the issuing transaction ends:
# issuers queue here, and a rollback gives the number back (no gaps).
NEXT_SEQUENCE = """
INSERT INTO invoice_counters AS c (series, year, last_sequence) VALUES (%(series)s, %(year)s, 1)
ON CONFLICT (series, year) DO UPDATE SET last_sequence = c.last_sequence + 1
RETURNING last_sequence
"""

# A draft; for an invoice, nothing when the organisation's month has one already.
INSERT_INVOICE = """
INSERT INTO invoices (id, number, kind, series, year, sequence, organisation_id, organisation_name, tier,
                      period_start, period_end, currency, total_cents, credited_invoice_id, reason)
VALUES (%(id)s, %(number)s, %(kind)s, %(series)s, %(year)s, %(sequence)s, %(organisation_id)s,
        %(organisation_name)s, %(tier)s, %(period_start)s, %(period_end)s, %(currency)s, %(total_cents)s,
        %(credited_invoice_id)s, %(reason)s)
ON CONFLICT (organisation_id, period_start) WHERE kind = 'invoice' DO NOTHING
RETURNING id
"""

INSERT_LINES = """
INSERT INTO invoice_lines (invoice_id, position, kind, description, project_id, project_name, environment_id,
                           environment_name, messages_in, messages_out, bytes_in, bytes_out, requests,
                           storage_gb_months, amount_cents)
SELECT %(invoice_id)s, v.*
FROM unnest(%(position)s::int[], %(kind)s::text[], %(description)s::text[], %(project_id)s::text[],
            %(project_name)s::text[], %(environment_id)s::text[], %(environment_name)s::text[],
            %(messages_in)s::bigint[], %(messages_out)s::bigint[], %(bytes_in)s::bigint[],
            %(bytes_out)s::bigint[], %(requests)s::bigint[], %(storage_gb_months)s::numeric[],
            %(amount_cents)s::bigint[]) AS v
"""

ISSUE = """
UPDATE invoices SET status = 'issued', issued_at = %(issued_at)s WHERE id = %(id)s AND status = 'draft'
"""

_COLUMNS = """
i.id, i.number, i.kind, i.organisation_id, i.organisation_name, i.tier, i.period_start, i.period_end,
i.currency, i.total_cents, i.reason, i.issued_at, c.number AS credited_number
"""

# An organisation's issued documents, newest period first, credit notes after their invoice.
SELECT_INVOICES = f"""
SELECT {_COLUMNS}
FROM invoices i LEFT JOIN invoices c ON c.id = i.credited_invoice_id
WHERE i.organisation_id = %(organisation_id)s AND i.status = 'issued'
ORDER BY i.period_start DESC, i.kind DESC, i.number DESC
LIMIT %(limit)s
"""

# One issued document by number, only within the organisation (another's is not found).
SELECT_INVOICE = f"""
SELECT {_COLUMNS}
FROM invoices i LEFT JOIN invoices c ON c.id = i.credited_invoice_id
WHERE i.number = %(number)s AND i.status = 'issued'
  AND (%(organisation_id)s::text IS NULL OR i.organisation_id = %(organisation_id)s::text)
"""

SELECT_PERIOD_INVOICE = f"""
SELECT {_COLUMNS}
FROM invoices i LEFT JOIN invoices c ON c.id = i.credited_invoice_id
WHERE i.organisation_id = %(organisation_id)s AND i.period_start = %(period_start)s AND i.kind = 'invoice'
"""

SELECT_LINES = """
SELECT position, kind, description, project_id, project_name, environment_id, environment_name, messages_in,
       messages_out, bytes_in, bytes_out, requests, storage_gb_months, amount_cents
FROM invoice_lines WHERE invoice_id = %(invoice_id)s ORDER BY position
"""

# What credit notes already took back from an invoice (a negative number of cents).
SELECT_CREDITED = """
SELECT coalesce(sum(total_cents), 0)::bigint AS credited FROM invoices WHERE credited_invoice_id = %(invoice_id)s
"""

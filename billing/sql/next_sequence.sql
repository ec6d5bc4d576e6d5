-- The next number of a series and year. The row stays locked until the issuing transaction ends:
-- issuers queue here, and a rollback gives the number back (no gaps).
INSERT INTO invoice_counters AS c (series, year, last_sequence) VALUES (%(series)s, %(year)s, 1)
ON CONFLICT (series, year) DO UPDATE SET last_sequence = c.last_sequence + 1
RETURNING last_sequence

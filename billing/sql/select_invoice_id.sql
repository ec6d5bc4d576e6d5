SELECT id FROM invoices WHERE number = %(number)s

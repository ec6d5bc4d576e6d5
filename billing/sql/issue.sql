UPDATE invoices SET status = 'issued', issued_at = %(issued_at)s WHERE id = %(id)s AND status = 'draft'

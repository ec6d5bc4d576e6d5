"""Usage metering, rollups, plans and invoices."""

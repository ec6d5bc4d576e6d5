"""Dead letters: inspect and replay, threshold alerts and their signed webhooks."""

"""The write path: publish rules, the group-commit segment writer and the segment codec."""

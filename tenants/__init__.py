"""Organisations, users, projects, environments, API keys, tiers and their limits."""

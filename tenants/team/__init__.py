"""Teams: invitations by email, members and roles, password resets, the audit log.

Functions in :mod:`invites`, :mod:`members`, :mod:`resets` and :mod:`audit` run in the caller's
transaction (the CLI uses them so); :class:`~tenants.team.service.TeamService` owns connections
for the dashboard. SQL lives in ``sql/``, one statement per file.
"""

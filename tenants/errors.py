"""Errors of the tenancy domain."""

from __future__ import annotations

from core.errors import ClientError, Conflict, NotFound


class InvalidApiKey(ClientError):
    """Missing, malformed, unknown, revoked or expired: one answer for all, so nothing leaks."""

    code = "INVALID_API_KEY"

    def __init__(self) -> None:
        super().__init__("The API key is missing, malformed, or has been revoked.")


class Forbidden(ClientError):
    """A valid credential without the right to do this."""

    code = "FORBIDDEN"


class KeyLimitReached(Conflict):
    """An environment already has its two active keys."""

    code = "KEY_LIMIT_REACHED"

    def __init__(self, environment_id: str, limit: int) -> None:
        super().__init__(
            f"Environment {environment_id} already has {limit} active API keys; revoke one before creating another.",
            environment_id=environment_id,
            limit=limit,
        )


class KeyNotFound(NotFound):
    """No such key in the caller's environment."""

    code = "KEY_NOT_FOUND"

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"The API key '{key_id}' does not exist in this environment.", key_id=key_id
        )


class OrganisationNotFound(NotFound):
    """No such organisation."""

    code = "ORGANISATION_NOT_FOUND"

    def __init__(self, organisation_id: str) -> None:
        super().__init__(
            f"The organisation '{organisation_id}' does not exist.", organisation_id=organisation_id
        )


class ProjectNotFound(NotFound):
    """No such project in the organisation."""

    code = "PROJECT_NOT_FOUND"

    def __init__(self, project_id: str) -> None:
        super().__init__(f"The project '{project_id}' does not exist.", project_id=project_id)


class EnvironmentNotFound(NotFound):
    """No such environment."""

    code = "ENVIRONMENT_NOT_FOUND"

    def __init__(self, environment: str) -> None:
        super().__init__(
            f"The environment '{environment}' does not exist.", environment=environment
        )


class EmailTaken(Conflict):
    """A user with this email exists already."""

    code = "EMAIL_TAKEN"

    def __init__(self, email: str) -> None:
        super().__init__(f"A user with email '{email}' already exists.", email=email)


class InvalidCredentials(ClientError):
    """Wrong email or password (one answer for both)."""

    code = "INVALID_CREDENTIALS"

    def __init__(self) -> None:
        super().__init__("Email or password is incorrect.")

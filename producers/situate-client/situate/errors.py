"""What the clients raise: the API's answer when it is an error, its status and its message."""

from __future__ import annotations


class PublicError(Exception):
    """An error whose message was written for the user: shown as it is."""


class SituateError(PublicError, RuntimeError):
    """What ``SituateClient`` raises when the API answers with an error: ``status`` is the HTTP
    status, the message says the method, the path and what the API answered."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status

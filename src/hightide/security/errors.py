"""The one error every SASL mechanism server raises when an exchange fails."""

from __future__ import annotations


class SaslFailure(Exception):
    """Authentication failed. ``str()`` says why (never a secret); ``public`` is True
    when Kafka shows that text to the client in SaslAuthenticate's error message, False
    when the client only gets the generic "invalid credentials" text (so that, e.g., an
    unknown user and a wrong password look the same)."""

    def __init__(self, message: str, *, public: bool) -> None:
        super().__init__(message)
        self.public = public

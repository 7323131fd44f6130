"""Ray Data's exception names: a UDF's failure is a `UserCodeException` (also `oxray.exceptions`')."""

from oxray.exceptions import UserCodeException


class RayDataUserCodeException(UserCodeException):
    """Ray's name for a Data UDF's failure; oxray raises `UserCodeException` itself."""


__all__ = ["RayDataUserCodeException", "UserCodeException"]

"""The State API's errors, under Ray's names."""


class RayStateApiException(Exception):
    """The cluster's State API refused a request or could not answer it whole."""

"""The search algorithms Ray wraps that oxray does not yet: each is importable
under Ray's module name and raises, naming itself, when constructed."""


def refused(name: str, package: str):
    class Refused:
        def __init__(self, *args, **kwargs):
            raise NotImplementedError(
                f"{name} (the {package} package) is not supported by oxray's Tune yet; use OptunaSearch or the "
                "default BasicVariantGenerator"
            )

    Refused.__name__ = Refused.__qualname__ = name
    return Refused

"""`oxray.tune.logger`: the loggers under Ray's module name."""

from oxray.tune.callback import (
    CSVLoggerCallback,
    JsonLoggerCallback,
    LoggerCallback,
    TBXLoggerCallback,
)

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "TBXLoggerCallback"]

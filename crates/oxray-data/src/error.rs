//! `DataError`: what went wrong while listing, reading or writing data, each
//! message naming the path or value and what was expected.

use arrow_schema::ArrowError;

/// Every failure of the data engine. The Python binding maps `NotFound` and
/// `NothingMatched` to `FileNotFoundError`, I/O to `OSError`, the rest to `ValueError`.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: no such file or directory (check the path, or that the S3 bucket and key exist)")]
    NotFound { path: String },
    #[error("{pattern}: the {what} holds no files to read{}", extensions_hint(.extensions))]
    NothingMatched { pattern: String, what: &'static str, extensions: Vec<String> },
    #[error("invalid path {uri:?}: {reason}")]
    InvalidUri { uri: String, reason: String },
    #[error("{path} is not a parquet file: {reason}")]
    NotParquet { path: String, reason: String },
    #[error("{path}: cannot read parquet data: {reason}")]
    BadParquet { path: String, reason: String },
    #[error(
        "schemas differ between {first} and {other}: {difference} (all files of a dataset need the same columns and types)"
    )]
    SchemaMismatch { first: String, other: String, difference: String },
    #[error("{what} differ: {difference}")]
    BatchSchemaMismatch { what: &'static str, difference: String },
    #[error("unknown column {column:?} in {path}; its columns are {available:?}")]
    UnknownColumn { column: String, path: String, available: Vec<String> },
    #[error("{name}={value} is invalid: expected {expected}")]
    InvalidArgument { name: &'static str, value: String, expected: String },
    #[error("{path}: {reason}")]
    BadFile { path: String, reason: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{op} {path}: {source}")]
    Remote {
        op: &'static str,
        path: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{what}: {source}")]
    Arrow {
        what: String,
        #[source]
        source: ArrowError,
    },
}

pub type Result<T> = std::result::Result<T, DataError>;

/// Why a listing may have come out empty, besides the path itself.
fn extensions_hint(extensions: &[String]) -> String {
    if extensions.is_empty() {
        " (names starting with '.' or '_' are skipped)".to_string()
    } else {
        format!(" with one of the extensions {extensions:?} (names starting with '.' or '_' are skipped)")
    }
}

impl DataError {
    /// Whether the error means "this path does not exist" (Python's `FileNotFoundError`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, DataError::NotFound { .. } | DataError::NothingMatched { .. })
    }

    /// Whether the error is a failure of the disk or the network (Python's `OSError`).
    pub fn is_io(&self) -> bool {
        matches!(self, DataError::Io { .. } | DataError::Remote { .. })
    }

    pub(crate) fn io(op: &'static str, path: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> DataError {
        let path = path.to_string();
        move |source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                DataError::NotFound { path }
            } else {
                DataError::Io { op, path, source }
            }
        }
    }

    pub(crate) fn remote(
        op: &'static str,
        path: impl std::fmt::Display,
    ) -> impl FnOnce(object_store::Error) -> DataError {
        let path = path.to_string();
        move |source| match source {
            object_store::Error::NotFound { .. } => DataError::NotFound { path },
            source => DataError::Remote { op, path, source },
        }
    }

    pub(crate) fn arrow(what: impl std::fmt::Display) -> impl FnOnce(ArrowError) -> DataError {
        let what = what.to_string();
        move |source| DataError::Arrow { what, source }
    }

    pub(crate) fn invalid(name: &'static str, value: impl std::fmt::Display, expected: impl Into<String>) -> DataError {
        DataError::InvalidArgument { name, value: value.to_string(), expected: expected.into() }
    }
}

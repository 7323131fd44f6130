//! Job records in redb (`jobs.redb` in the head's state directory), written
//! through on every change and read back on request, so a restarted head lists
//! every job and memory does not grow with finished ones.

use crate::record::JobRecord;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};

const JOBS: TableDefinition<&str, &str> = TableDefinition::new("jobs");

pub(crate) struct JobStore {
    db: Database,
}

/// Why the job store could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create {}: {source}", .path.display())]
    Create { path: PathBuf, source: std::io::Error },
    #[error(
        "the job store {} is in use by another head: stop it (`oxray stop`) or use another --state-dir",
        .path.display()
    )]
    InUse { path: PathBuf },
    #[error("cannot open the job store {}: {source}", .path.display())]
    Open { path: PathBuf, source: redb::DatabaseError },
    #[error("the job store failed: {0}")]
    Db(#[from] redb::Error),
    #[error("the record of job {id} is corrupt")]
    Corrupt { id: String },
}

/// Every redb error type converts into `redb::Error`, but `?` applies one conversion only.
fn db_error(e: impl Into<redb::Error>) -> StoreError {
    StoreError::Db(e.into())
}

impl JobStore {
    /// Opens (or creates, 0600) `<dir>/jobs.redb`.
    pub(crate) fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join("jobs.redb");
        oxray_object_store::create_private_dir_all(dir)
            .map_err(|source| StoreError::Create { path: dir.to_path_buf(), source })?;
        oxray_object_store::private_file_options()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| StoreError::Create { path: path.clone(), source })?;
        // A small page cache: the records are read from disk on request, so memory stays flat
        // however many jobs are kept.
        let db = Database::builder().set_cache_size(4 << 20).create(&path).map_err(|source| match source {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse { path: path.clone() },
            source => StoreError::Open { path: path.clone(), source },
        })?;
        Ok(Self { db })
    }

    pub(crate) fn put(&self, record: &JobRecord) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(db_error)?;
        {
            let mut table = txn.open_table(JOBS).map_err(db_error)?;
            table.insert(record.submission_id.as_str(), record.to_stored().as_str()).map_err(db_error)?;
        }
        txn.commit().map_err(db_error)
    }

    /// Writes `record` unless a job with its id is kept already, in one transaction (two
    /// submits with one id cannot both pass the check); whether it was written.
    pub(crate) fn insert_new(&self, record: &JobRecord) -> Result<bool, StoreError> {
        let txn = self.db.begin_write().map_err(db_error)?;
        {
            let mut table = txn.open_table(JOBS).map_err(db_error)?;
            if table.get(record.submission_id.as_str()).map_err(db_error)?.is_some() {
                return Ok(false); // dropping the transaction aborts it
            }
            table.insert(record.submission_id.as_str(), record.to_stored().as_str()).map_err(db_error)?;
        }
        txn.commit().map_err(db_error)?;
        Ok(true)
    }

    pub(crate) fn get(&self, id: &str) -> Result<Option<JobRecord>, StoreError> {
        let txn = self.db.begin_read().map_err(db_error)?;
        let table = match txn.open_table(JOBS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(db_error(e)),
        };
        let Some(value) = table.get(id).map_err(db_error)? else { return Ok(None) };
        JobRecord::from_stored(value.value()).map(Some).ok_or_else(|| StoreError::Corrupt { id: id.to_string() })
    }

    /// Every record, oldest submission first.
    pub(crate) fn all(&self) -> Result<Vec<JobRecord>, StoreError> {
        let txn = self.db.begin_read().map_err(db_error)?;
        let table = match txn.open_table(JOBS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(db_error(e)),
        };
        let mut out = Vec::new();
        for row in table.iter().map_err(db_error)? {
            let (key, value) = row.map_err(db_error)?;
            let record = JobRecord::from_stored(value.value())
                .ok_or_else(|| StoreError::Corrupt { id: key.value().to_string() })?;
            out.push(record);
        }
        out.sort_by_key(|r| r.start_time);
        Ok(out)
    }

    pub(crate) fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let txn = self.db.begin_write().map_err(db_error)?;
        let removed = {
            let mut table = txn.open_table(JOBS).map_err(db_error)?;
            table.remove(id).map_err(db_error)?.is_some()
        };
        txn.commit().map_err(db_error)?;
        Ok(removed)
    }
}

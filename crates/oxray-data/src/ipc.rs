//! One record batch as an Arrow IPC stream: the bytes a block is stored as.

use crate::error::{DataError, Result};
use arrow_array::RecordBatch;
use arrow_ipc::writer::StreamWriter;

/// The IPC stream (schema message, one batch, end marker) of `batch`.
pub fn encode_ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    let cannot = || DataError::arrow("cannot encode a record batch as Arrow IPC");
    let mut out = Vec::with_capacity(batch.get_array_memory_size() + 1024);
    let mut writer = StreamWriter::try_new(&mut out, batch.schema_ref()).map_err(cannot())?;
    writer.write(batch).map_err(cannot())?;
    writer.finish().map_err(cannot())?;
    drop(writer);
    Ok(out)
}

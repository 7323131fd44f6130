//! oxray Data's engine, called from `oxray._native` (the `data_*` functions
//! and `Data*` classes): the logical plan's optimizer (`plan`), the streaming
//! executor's scheduler (`executor`), listing inputs, reading parquet (footers,
//! projected and limited fragments, a parallel bounded stream), csv, json and
//! text (large csv and JSON Lines files in line-aligned byte ranges), writing parquet, csv, json and raw bytes (local or S3, never leaving a
//! half-written file under its final name), and rebatching with a seeded local
//! shuffle buffer. Arrow record batches are the unit everywhere.

mod batcher;
mod error;
pub mod executor;
mod ipc;
mod line_ranges;
mod parquet;
pub mod plan;
mod schema;
mod source;
mod text;
mod write;

pub use batcher::{Batcher, concat_batches};
pub use error::{DataError, Result};
pub use ipc::encode_ipc;
pub use line_ranges::{read_csv_range, read_json_lines_range, read_range};
pub use parquet::{
    FragmentReader, ParquetStream, ReadOptions, RowGroupSizes, StreamOptions, inspect_parquet, read_parquet,
};
pub use source::expand_paths;
pub use text::{read_bytes, read_csv, read_json, read_text};
pub use write::{write_bytes, write_csv, write_json, write_parquet};

/// Rows per batch from the csv, json and text readers (callers rebatch).
pub const TEXT_BATCH_ROWS: usize = 65_536;

#[cfg(test)]
pub(crate) mod testutil {
    //! Test data: small batches of known rows and parquet files with several row groups.

    use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use std::path::Path;
    use std::sync::Arc;

    /// Rows `start..end`: `a` = i, `b` = i / 2 as f32, `c` = "row{i}".
    pub(crate) fn rows(start: i64, end: i64) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(start..end));
        let b: ArrayRef = Arc::new(Float32Array::from_iter_values((start..end).map(|i| i as f32 / 2.0)));
        let c: ArrayRef = Arc::new(StringArray::from_iter_values((start..end).map(|i| format!("row{i}"))));
        RecordBatch::try_from_iter([("a", a), ("b", b), ("c", c)]).unwrap()
    }

    /// Writes `batch` to `path` in row groups of `group_rows`.
    pub(crate) fn write_parquet_file(path: &Path, batch: &RecordBatch, group_rows: usize) {
        let file = std::fs::File::create(path).unwrap();
        let props = WriterProperties::builder().set_max_row_group_row_count(Some(group_rows)).build();
        let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
    }

    /// Column `a` of every batch, in order.
    pub(crate) fn column_a(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let a = b.column_by_name("a").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
                a.values().to_vec()
            })
            .collect()
    }
}

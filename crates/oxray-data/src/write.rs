//! Writers: parquet, csv (with a header), JSON Lines and raw bytes, into
//! `<dir_uri>/<filename>`. A local file is written under a temporary name in
//! the same directory and renamed when complete; an S3 object appears only
//! when its single PUT or multipart upload completes.

use crate::error::{DataError, Result};
use crate::schema::merge_schemas;
use crate::source::{Location, block_on, object_path};
use arrow_array::RecordBatch;
use object_store::buffered::BufWriter;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use tokio::io::AsyncWriteExt;

fn check_filename(filename: &str) -> Result<()> {
    if filename.is_empty() || filename.contains('/') || filename == "." || filename == ".." || filename.contains('\0') {
        return Err(DataError::invalid("filename", format!("{filename:?}"), "a plain file name without '/'"));
    }
    Ok(())
}

fn random_suffix() -> u64 {
    rand::random()
}

/// Writes `<dir_uri>/<filename>` with `body`, all or nothing; returns its URI.
fn write_file(
    dir_uri: &str,
    filename: &str,
    body: impl FnOnce(&mut (dyn Write + Send)) -> Result<()>,
) -> Result<String> {
    check_filename(filename)?;
    match Location::parse(dir_uri)? {
        Location::Local(dir) => {
            std::fs::create_dir_all(&dir).map_err(DataError::io("cannot create directory", dir.display()))?;
            let dest = dir.join(filename);
            let tmp = dir.join(format!(".{filename}.{}-{:x}.tmp", std::process::id(), random_suffix()));
            let written = (|| {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(&tmp)
                    .map_err(DataError::io("cannot create", tmp.display()))?;
                let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
                body(&mut out)?;
                out.flush().map_err(DataError::io("cannot write", tmp.display()))?;
                std::fs::rename(&tmp, &dest)
                    .map_err(DataError::io("cannot rename the finished file to", dest.display()))
            })();
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            Ok(dest.display().to_string())
        }
        Location::S3 { store, bucket_uri, key } => {
            let key = if key.is_empty() { filename.to_string() } else { format!("{key}/{filename}") };
            let uri = format!("{bucket_uri}/{key}");
            let mut data = Vec::new();
            body(&mut data)?;
            let path = object_path(&uri, &key)?;
            block_on(async {
                // One PUT for a small file, a multipart upload for a big one.
                let mut writer = BufWriter::new(store, path);
                let uploaded = match writer.write_all(&data).await {
                    Ok(()) => writer.shutdown().await,
                    Err(e) => Err(e),
                };
                if uploaded.is_err() {
                    // No half-finished multipart upload is left behind.
                    let _ = writer.abort().await;
                }
                uploaded
            })
            .map_err(|e| DataError::Io { op: "cannot upload", path: uri.clone(), source: e })?;
            Ok(uri)
        }
    }
}

/// The compression codec named by `name`.
fn compression(name: &str) -> Result<Compression> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "snappy" => Compression::SNAPPY,
        "zstd" => Compression::ZSTD(ZstdLevel::default()),
        "lz4" => Compression::LZ4_RAW,
        "gzip" => Compression::GZIP(GzipLevel::default()),
        "none" | "uncompressed" => Compression::UNCOMPRESSED,
        _ => {
            return Err(DataError::invalid(
                "compression",
                format!("{name:?}"),
                "one of \"snappy\", \"zstd\", \"lz4\", \"gzip\", \"none\"",
            ));
        }
    })
}

/// Writes the batches (same columns; an empty batch gives the schema of an
/// empty file) as one parquet file `<dir_uri>/<filename>`.
pub fn write_parquet(batches: &[RecordBatch], dir_uri: &str, filename: &str, compression_name: &str) -> Result<String> {
    let codec = compression(compression_name)?;
    let Some(first) = batches.first() else {
        return Err(DataError::invalid(
            "batches",
            "[]",
            "at least one record batch (pass an empty batch to write an empty file with its schema)",
        ));
    };
    let mut schema = first.schema();
    for (i, batch) in batches.iter().enumerate().skip(1) {
        schema = merge_schemas(&schema, batch.schema_ref()).map_err(|difference| DataError::BatchSchemaMismatch {
            what: "the written batches' columns",
            difference: format!("batch {i} against batch 0: {difference}"),
        })?;
    }
    let props = WriterProperties::builder().set_compression(codec).build();
    write_file(dir_uri, filename, |out| {
        let fail = |e: parquet::errors::ParquetError| DataError::BadFile {
            path: format!("{dir_uri}/{filename}"),
            reason: format!("cannot write parquet: {e}"),
        };
        let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(props)).map_err(fail)?;
        for batch in batches {
            let batch = if batch.schema_ref() == &schema {
                batch.clone()
            } else {
                RecordBatch::try_new(schema.clone(), batch.columns().to_vec())
                    .map_err(DataError::arrow("cannot write a batch with the file's schema"))?
            };
            writer.write(&batch).map_err(fail)?;
        }
        writer.close().map_err(fail)?;
        Ok(())
    })
}

/// Writes the batches as csv with a header row.
pub fn write_csv(batches: &[RecordBatch], dir_uri: &str, filename: &str) -> Result<String> {
    write_file(dir_uri, filename, |out| {
        let mut writer = arrow_csv::WriterBuilder::new().with_header(true).build(out);
        for batch in batches {
            writer.write(batch).map_err(DataError::arrow(format!("cannot write csv to {dir_uri}/{filename}")))?;
        }
        Ok(())
    })
}

/// Writes the batches as JSON Lines (one object per row).
pub fn write_json(batches: &[RecordBatch], dir_uri: &str, filename: &str) -> Result<String> {
    write_file(dir_uri, filename, |out| {
        let fail = || DataError::arrow(format!("cannot write JSON to {dir_uri}/{filename}"));
        // Nulls written as `null` (as pandas does), so an all-null column survives a round trip.
        let mut writer = arrow_json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, arrow_json::writer::LineDelimited>(out);
        for batch in batches {
            writer.write(batch).map_err(fail())?;
        }
        writer.finish().map_err(fail())
    })
}

/// Writes `data` as the file `<dir_uri>/<filename>`.
pub fn write_bytes(dir_uri: &str, filename: &str, data: &[u8]) -> Result<String> {
    write_file(dir_uri, filename, |out| {
        out.write_all(data).map_err(DataError::io("cannot write", format!("{dir_uri}/{filename}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{column_a, rows};
    use std::os::unix::fs::PermissionsExt;

    fn listing(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn writers_round_trip_and_leave_only_the_finished_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out/nested");
        let out_uri = out.display().to_string();
        let batches = [rows(0, 100), rows(100, 250)];
        let parquet = write_parquet(&batches, &out_uri, "part-0.parquet", "zstd").unwrap();
        assert_eq!(parquet, out.join("part-0.parquet").display().to_string());
        let read =
            crate::read_parquet(&parquet, &crate::ReadOptions { batch_size: 1000, ..Default::default() }).unwrap();
        assert_eq!(column_a(&read), (0..250).collect::<Vec<_>>());

        let csv = write_csv(&batches, &out_uri, "part-0.csv").unwrap();
        let back = crate::read_csv(&csv, ",", true, None).unwrap();
        assert_eq!(column_a(&back), (0..250).collect::<Vec<_>>());

        let json = write_json(&batches, &out_uri, "part-0.json").unwrap();
        let back = crate::read_json(&json, None).unwrap();
        assert_eq!(column_a(&back), (0..250).collect::<Vec<_>>());

        let raw = write_bytes(&format!("file://{out_uri}"), "blob.bin", b"\x00\x01").unwrap();
        assert_eq!(std::fs::read(&raw).unwrap(), b"\x00\x01");

        let empty = write_parquet(&[rows(0, 0)], &out_uri, "empty.parquet", "snappy").unwrap();
        let (schema, groups) = crate::inspect_parquet(&[empty]).unwrap();
        assert_eq!(schema.fields().len(), 3);
        assert_eq!(groups[0].iter().map(|g| g.0).sum::<u64>(), 0);

        assert_eq!(listing(&out), ["blob.bin", "empty.parquet", "part-0.csv", "part-0.json", "part-0.parquet"]);
        let mode = std::fs::metadata(&parquet).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o644, 0o644, "readable like any user output: {mode:o}");
    }

    #[test]
    fn a_failed_write_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().display().to_string();
        let mismatched = [rows(0, 10), rows(0, 10).project(&[0]).unwrap()];
        let err = write_parquet(&mismatched, &uri, "bad.parquet", "snappy").unwrap_err().to_string();
        assert!(err.contains("batch 1"), "{err}");
        let err = write_parquet(&[rows(0, 1)], &uri, "x.parquet", "brotli").unwrap_err().to_string();
        assert!(err.contains("compression=\"brotli\"") && err.contains("snappy"), "{err}");
        let err = write_parquet(&[], &uri, "x.parquet", "snappy").unwrap_err().to_string();
        assert!(err.contains("empty batch"), "{err}");
        let err = write_csv(&[rows(0, 1)], &uri, "../escape.csv").unwrap_err().to_string();
        assert!(err.contains("filename=\"../escape.csv\""), "{err}");
        // A body that fails halfway: the temporary file is removed, nothing is named as complete.
        let failed = write_file(&uri, "half.bin", |out| {
            out.write_all(b"half").unwrap();
            Err(DataError::invalid("body", "x", "y"))
        });
        assert!(failed.is_err());
        assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));
    }
}

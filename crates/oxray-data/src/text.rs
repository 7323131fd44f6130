//! Whole-file readers: csv (schema inferred), JSON Lines or a JSON array of
//! objects, text (one row per line) and raw bytes. `.gz` inputs of the text
//! formats are decompressed.

use crate::TEXT_BATCH_ROWS;
use crate::error::{DataError, Result};
use crate::source::{Location, block_on, object_path};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use object_store::ObjectStoreExt;
use std::io::{Cursor, Read};
use std::sync::Arc;

/// The bytes of the file at `uri`.
pub fn read_bytes(uri: &str) -> Result<Bytes> {
    match Location::file(uri)? {
        Location::Local(path) => {
            if path.is_dir() {
                return Err(DataError::BadFile { path: uri.to_string(), reason: "is a directory, not a file".into() });
            }
            Ok(Bytes::from(std::fs::read(&path).map_err(DataError::io("cannot read", uri))?))
        }
        Location::S3 { store, key, .. } => {
            let path = object_path(uri, &key)?;
            block_on(async { store.get(&path).await?.bytes().await }).map_err(DataError::remote("cannot read", uri))
        }
    }
}

/// The file's bytes, decompressed when its name ends in `.gz`.
fn read_decompressed(uri: &str) -> Result<Bytes> {
    let raw = read_bytes(uri)?;
    if !uri.to_ascii_lowercase().ends_with(".gz") {
        return Ok(raw);
    }
    let mut out = Vec::with_capacity(raw.len() * 4);
    flate2::read::MultiGzDecoder::new(&raw[..])
        .read_to_end(&mut out)
        .map_err(|e| DataError::BadFile { path: uri.to_string(), reason: format!("cannot decompress gzip: {e}") })?;
    Ok(Bytes::from(out))
}

fn bad_file(uri: &str) -> impl FnOnce(arrow_schema::ArrowError) -> DataError {
    let path = uri.to_string();
    move |e| DataError::BadFile { path, reason: e.to_string() }
}

/// A csv file's rows, with the schema inferred from the whole file.
pub fn read_csv(uri: &str, delimiter: &str, has_header: bool, columns: Option<&[String]>) -> Result<Vec<RecordBatch>> {
    let delimiter = match delimiter.as_bytes() {
        [byte] if byte.is_ascii() => *byte,
        _ => return Err(DataError::invalid("delimiter", format!("{delimiter:?}"), "one ASCII character")),
    };
    let data = read_decompressed(uri)?;
    let format = arrow_csv::reader::Format::default().with_header(has_header).with_delimiter(delimiter);
    let (schema, _) = format.infer_schema(Cursor::new(&data[..]), None).map_err(bad_file(uri))?;
    let mut builder =
        arrow_csv::ReaderBuilder::new(Arc::new(schema.clone())).with_format(format).with_batch_size(TEXT_BATCH_ROWS);
    if let Some(columns) = columns {
        let indices = columns
            .iter()
            .map(|name| {
                schema.index_of(name).map_err(|_| DataError::UnknownColumn {
                    column: name.clone(),
                    path: uri.to_string(),
                    available: schema.fields().iter().map(|f| f.name().clone()).collect(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        builder = builder.with_projection(indices);
    }
    let reader = builder.build(Cursor::new(&data[..])).map_err(bad_file(uri))?;
    reader.map(|b| b.map_err(bad_file(uri))).collect()
}

/// JSON Lines, or one top-level array of objects (`lines=None`: an array when
/// the first non-space byte is `[`).
pub fn read_json(uri: &str, lines: Option<bool>) -> Result<Vec<RecordBatch>> {
    let data = read_decompressed(uri)?;
    let is_array = match lines {
        Some(lines) => !lines,
        None => data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'['),
    };
    if !is_array {
        let (schema, _) = arrow_json::reader::infer_json_schema(Cursor::new(&data[..]), None).map_err(bad_file(uri))?;
        let reader = arrow_json::ReaderBuilder::new(Arc::new(schema))
            .with_batch_size(TEXT_BATCH_ROWS)
            .build(Cursor::new(&data[..]))
            .map_err(bad_file(uri))?;
        return reader.map(|b| b.map_err(bad_file(uri))).collect();
    }
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&data).map_err(|e| DataError::BadFile {
        path: uri.to_string(),
        reason: format!("expected a JSON array of objects (or JSON Lines with lines=True): {e}"),
    })?;
    let schema =
        Arc::new(arrow_json::reader::infer_json_schema_from_iterator(rows.iter().map(Ok)).map_err(bad_file(uri))?);
    let mut decoder = arrow_json::ReaderBuilder::new(schema)
        .with_batch_size(TEXT_BATCH_ROWS)
        .build_decoder()
        .map_err(bad_file(uri))?;
    let mut out = Vec::new();
    for chunk in rows.chunks(TEXT_BATCH_ROWS) {
        decoder.serialize(chunk).map_err(bad_file(uri))?;
        if let Some(batch) = decoder.flush().map_err(bad_file(uri))? {
            out.push(batch);
        }
    }
    Ok(out)
}

/// One row per line in a utf8 column `text` (`\n` or `\r\n` line ends; no row
/// for the end of the last line), whitespace-only lines dropped with `drop_empty_lines`.
pub fn read_text(uri: &str, drop_empty_lines: bool) -> Result<Vec<RecordBatch>> {
    let data = read_decompressed(uri)?;
    let text = std::str::from_utf8(&data).map_err(|e| DataError::BadFile {
        path: uri.to_string(),
        reason: format!("not UTF-8 text: invalid byte at offset {}", e.valid_up_to()),
    })?;
    let schema = Arc::new(Schema::new(vec![Field::new("text", DataType::Utf8, false)]));
    let mut out = Vec::new();
    let mut lines: Vec<&str> = Vec::with_capacity(TEXT_BATCH_ROWS);
    let mut flush = |lines: &mut Vec<&str>| -> Result<()> {
        let column: ArrayRef = Arc::new(StringArray::from_iter_values(lines.drain(..)));
        out.push(RecordBatch::try_new(schema.clone(), vec![column]).map_err(bad_file(uri))?);
        Ok(())
    };
    for line in text.lines() {
        if drop_empty_lines && line.trim().is_empty() {
            continue;
        }
        lines.push(line);
        if lines.len() == TEXT_BATCH_ROWS {
            flush(&mut lines)?;
        }
    }
    if !lines.is_empty() {
        flush(&mut lines)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use std::io::Write;

    fn file(dir: &std::path::Path, name: &str, content: &[u8]) -> String {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    }

    fn strings(batches: &[RecordBatch], column: &str) -> Vec<String> {
        batches
            .iter()
            .flat_map(|b| b.column_by_name(column).unwrap().as_string::<i32>().iter().map(|s| s.unwrap().to_string()))
            .collect()
    }

    #[test]
    fn csv_infers_types_projects_columns_and_reads_gzip() {
        let dir = tempfile::tempdir().unwrap();
        let content = b"id;name;score\n1;ann;0.5\n2;bob;1.5\n";
        let plain = file(dir.path(), "a.csv", content);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(content).unwrap();
        let zipped = file(dir.path(), "a.csv.gz", &gz.finish().unwrap());
        for uri in [&plain, &zipped] {
            let batches = read_csv(uri, ";", true, Some(&["name".to_string(), "id".to_string()])).unwrap();
            let names: Vec<_> = batches[0].schema().fields().iter().map(|f| f.name().clone()).collect();
            assert_eq!(names, ["name", "id"]);
            assert_eq!(strings(&batches, "name"), ["ann", "bob"]);
            let ids = batches[0].column(1).as_primitive::<Int64Type>();
            assert_eq!(ids.values().to_vec(), [1, 2]);
        }
        let err = read_csv(&plain, ";", true, Some(&["nope".to_string()])).unwrap_err().to_string();
        assert!(err.contains("\"nope\"") && err.contains("\"score\""), "{err}");
        let err = read_csv(&plain, ";;", true, None).unwrap_err().to_string();
        assert!(err.contains("delimiter=\";;\""), "{err}");
        let headless = read_csv(&plain, ";", false, None).unwrap();
        assert_eq!(headless.iter().map(RecordBatch::num_rows).sum::<usize>(), 3);
    }

    #[test]
    fn json_lines_and_arrays_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        let lines = file(dir.path(), "a.jsonl", b"{\"a\": 1, \"s\": \"x\"}\n{\"a\": 2, \"s\": \"y\"}\n");
        let array = file(dir.path(), "b.json", b"  [{\"a\": 1, \"s\": \"x\"}, {\"a\": 2, \"s\": \"y\"}]");
        for (uri, lines) in [(&lines, None), (&lines, Some(true)), (&array, None), (&array, Some(false))] {
            let batches = read_json(uri, lines).unwrap();
            assert_eq!(strings(&batches, "s"), ["x", "y"], "{uri} {lines:?}");
        }
        let err = read_json(&lines, Some(false)).unwrap_err().to_string();
        assert!(err.contains(&lines) && err.contains("JSON array"), "{err}");
        let not_objects = file(dir.path(), "c.json", b"[1, 2]");
        let err = read_json(&not_objects, None).unwrap_err().to_string();
        assert!(err.contains(&not_objects) && err.contains("object"), "{err}");
    }

    #[test]
    fn text_is_one_row_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let uri = file(dir.path(), "a.txt", b"first\r\n\n  \nlast\n");
        assert_eq!(strings(&read_text(&uri, false).unwrap(), "text"), ["first", "", "  ", "last"]);
        assert_eq!(strings(&read_text(&uri, true).unwrap(), "text"), ["first", "last"]);
        let binary = file(dir.path(), "b.txt", b"ok\n\xff\xfe");
        let err = read_text(&binary, false).unwrap_err().to_string();
        assert!(err.contains(&binary) && err.contains("UTF-8"), "{err}");
        assert_eq!(&read_bytes(&binary).unwrap()[..], b"ok\n\xff\xfe");
        let missing = dir.path().join("missing.txt").display().to_string();
        assert!(read_bytes(&missing).unwrap_err().is_not_found());
    }
}

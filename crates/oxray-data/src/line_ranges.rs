//! Large csv and JSON Lines files read as several blocks: each read task takes
//! one byte range of the file and parses the whole lines that start in it, so
//! no task holds more than about a range (Ray streams such files in blocks).
//!
//! A line belongs to the range its first byte falls in: a range skips the end
//! of a line begun before it and reads past its end to finish its last line.
//! Quoted newlines inside csv values would break lines apart, so callers split
//! only files read with them off (pyarrow's default, `newlines_in_values=False`).

use crate::error::{DataError, Result};
use crate::source::{Location, block_on, object_path};
use crate::text::{csv_delimiter, csv_format, decode_csv, infer_csv_schema, parse_json_lines};
use arrow_array::RecordBatch;
use bytes::{Bytes, BytesMut};
use object_store::ObjectStoreExt;
use std::io::{Read, Seek, SeekFrom};

/// How far past a range's end a read looks at a time for the end of its last line.
const TAIL_STEP: u64 = 64 * 1024;
/// The csv types of every range come from the file's first lines, about this many bytes of
/// them (pyarrow's streaming reader, under Ray, infers from its first block the same way).
const CSV_INFER_BYTES: u64 = 1 << 20;

/// Bytes `start..end` of the file at `uri` (fewer at its end).
pub fn read_range(uri: &str, start: u64, end: u64) -> Result<Bytes> {
    if end <= start {
        return Ok(Bytes::new());
    }
    match Location::parse(uri)? {
        Location::Local(path) => {
            let mut file = std::fs::File::open(&path).map_err(DataError::io("cannot open", uri))?;
            file.seek(SeekFrom::Start(start)).map_err(DataError::io("cannot seek in", uri))?;
            let mut out = Vec::with_capacity((end - start) as usize);
            file.take(end - start).read_to_end(&mut out).map_err(DataError::io("cannot read", uri))?;
            Ok(Bytes::from(out))
        }
        Location::S3 { store, key, .. } => {
            let path = object_path(uri, &key)?;
            let size = block_on(store.head(&path)).map_err(DataError::remote("cannot stat", uri))?.size;
            let end = end.min(size);
            if end <= start {
                return Ok(Bytes::new());
            }
            block_on(store.get_range(&path, start..end)).map_err(DataError::remote("cannot read", uri))
        }
    }
}

/// The whole lines that start in bytes `start..end` of the file, and the offset of the first.
pub(crate) fn read_line_range(uri: &str, start: u64, end: u64) -> Result<(Bytes, u64)> {
    // One byte before the range tells whether the range begins a line.
    let begin = start.saturating_sub(1);
    let mut data = BytesMut::from(&read_range(uri, begin, end)?[..]);
    let skip = if start == 0 {
        0
    } else {
        match data.iter().position(|b| *b == b'\n') {
            Some(newline) => newline + 1,
            None => return Ok((Bytes::new(), end)), // no line starts in the range
        }
    };
    if begin + skip as u64 >= end {
        return Ok((Bytes::new(), end));
    }
    // Finish the last line: read on until a newline at or after the range's end (or the file's end).
    let mut at = end;
    let ends_line = |data: &BytesMut| data.last() == Some(&b'\n');
    if !ends_line(&data) && data.len() as u64 == end - begin {
        loop {
            let tail = read_range(uri, at, at + TAIL_STEP)?;
            if tail.is_empty() {
                break;
            }
            if let Some(newline) = tail.iter().position(|b| *b == b'\n') {
                data.extend_from_slice(&tail[..=newline]);
                break;
            }
            data.extend_from_slice(&tail);
            at += tail.len() as u64;
        }
    }
    let first = begin + skip as u64;
    Ok((data.freeze().slice(skip..), first))
}

/// The csv rows of the lines that start in `start..end` (the file's first line is its
/// header when `has_header`), typed as the file's first lines are: a value later in the
/// file that those types cannot hold is an error naming its range.
pub fn read_csv_range(uri: &str, delimiter: &str, has_header: bool, start: u64, end: u64) -> Result<Vec<RecordBatch>> {
    let delimiter = csv_delimiter(delimiter)?;
    let (mut lines, first) = read_line_range(uri, start, end)?;
    if has_header && first == 0 {
        let header_len = lines.iter().position(|b| *b == b'\n').map_or(lines.len(), |n| n + 1);
        lines = lines.slice(header_len..);
    }
    if lines.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let (head, _) = read_line_range(uri, 0, CSV_INFER_BYTES)?;
    let schema = infer_csv_schema(uri, &head, delimiter, has_header)?;
    decode_csv(uri, &lines, csv_format(delimiter, false), schema, None).map_err(|e| in_range(e, first, end))
}

/// The JSON Lines rows of the lines that start in `start..end`.
pub fn read_json_lines_range(uri: &str, start: u64, end: u64) -> Result<Vec<RecordBatch>> {
    let (lines, first) = read_line_range(uri, start, end)?;
    if lines.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    parse_json_lines(uri, &lines, first)
}

/// A parse error of a range, saying which bytes of the file it read.
fn in_range(error: DataError, first: u64, end: u64) -> DataError {
    match error {
        DataError::BadFile { path, reason } => {
            DataError::BadFile { path, reason: format!("in the lines starting at bytes {first}..{end}: {reason}") }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    fn ids(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column_by_name("id").unwrap().as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    /// Every cut of the file into ranges reads each line exactly once.
    #[test]
    fn ranges_read_every_line_once_wherever_they_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut csv = String::from("id,name\n");
        let mut json = String::new();
        for i in 0..50 {
            csv.push_str(&format!("{i},name{}\n", "x".repeat(i % 7)));
            json.push_str(&format!("{{\"id\": {i}, \"pad\": \"{}\"}}\n", "y".repeat(i % 5)));
        }
        let csv_path = dir.path().join("a.csv");
        let json_path = dir.path().join("a.jsonl");
        std::fs::write(&csv_path, &csv).unwrap();
        std::fs::write(&json_path, &json).unwrap();
        let (csv_uri, json_uri) = (csv_path.display().to_string(), json_path.display().to_string());
        for step in [1u64, 7, 13, 64, 1000] {
            let cuts =
                |len: usize| (0..len as u64).step_by(step as usize).map(move |s| (s, (s + step).min(len as u64)));
            let mut from_csv = Vec::new();
            for (start, end) in cuts(csv.len()) {
                from_csv.extend(ids(&read_csv_range(&csv_uri, ",", true, start, end).unwrap()));
            }
            let mut from_json = Vec::new();
            for (start, end) in cuts(json.len()) {
                from_json.extend(ids(&read_json_lines_range(&json_uri, start, end).unwrap()));
            }
            assert_eq!(from_csv, (0..50).collect::<Vec<_>>(), "csv in ranges of {step} bytes");
            assert_eq!(from_json, (0..50).collect::<Vec<_>>(), "json in ranges of {step} bytes");
        }
    }

    #[test]
    fn csv_ranges_take_their_types_from_the_files_first_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.csv");
        let mut text = String::from("id\n");
        for i in 0..200_000 {
            text.push_str(&format!("{i}\n"));
        }
        let late = text.len() as u64;
        text.push_str("not-a-number\n");
        std::fs::write(&path, &text).unwrap();
        let uri = path.display().to_string();
        let tail = read_csv_range(&uri, ",", true, late - 100, text.len() as u64).unwrap_err().to_string();
        assert!(tail.contains(&uri) && tail.contains("in the lines starting at bytes"), "{tail}");
        let head = read_csv_range(&uri, ",", true, 0, 1000).unwrap();
        assert_eq!(head[0].schema().field(0).data_type(), &arrow_schema::DataType::Int64);
    }

    #[test]
    fn a_bad_line_is_named_by_its_offset_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        std::fs::write(&path, "{\"id\": 1}\n{\"id\": 2}\n{\"id\": 3\n").unwrap();
        let uri = path.display().to_string();
        let err = read_json_lines_range(&uri, 15, 40).unwrap_err().to_string();
        assert!(err.contains(&uri) && err.contains("the line (byte offset 20)"), "{err}");
    }
}

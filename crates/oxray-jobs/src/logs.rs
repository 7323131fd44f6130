//! Reading a job's log file in bounded pieces, whatever its size: from an offset, its end,
//! or its last lines. Nothing here reads a whole log into memory.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The most one read of a log returns.
pub const MAX_READ: u64 = 1 << 20;

/// At most `max` bytes of the file at `path` from `offset` (nothing when it cannot be read).
pub fn read_from(path: &Path, offset: u64, max: u64) -> Vec<u8> {
    let Ok(mut file) = std::fs::File::open(path) else { return Vec::new() };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let _ = file.take(max).read_to_end(&mut out);
    out
}

/// The last `max` bytes of the file at `path` (fewer when it is shorter).
pub fn read_tail(path: &Path, max: u64) -> Vec<u8> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    read_from(path, size.saturating_sub(max), max)
}

/// The last `n` lines of the file at `path`, cut to their last `max_chars` characters. Only
/// the end of the file that can hold those characters is read (4 bytes a character at most).
pub fn last_lines(path: &Path, n: usize, max_chars: usize) -> String {
    let bytes = read_tail(path, 4 * max_chars as u64 + 4);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join("\n");
    let skip = tail.chars().count().saturating_sub(max_chars);
    tail.chars().skip(skip).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole_file_last_lines(text: &str, n: usize, max_chars: usize) -> String {
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(n)..].join("\n");
        let skip = tail.chars().count().saturating_sub(max_chars);
        tail.chars().skip(skip).collect()
    }

    #[test]
    fn the_last_lines_from_the_end_equal_those_of_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let cases = [
            "short\nlog\n".to_string(),
            format!("{}\nend one\nend two", "x".repeat(300_000)),
            format!("{}\n", "é→𝄞 many-byte characters\n".repeat(20_000)),
            (0..50_000).map(|i| format!("line {i}\n")).collect(),
            String::new(),
        ];
        for text in cases {
            std::fs::write(&path, &text).unwrap();
            for n in [1, 10, 100_000] {
                assert_eq!(last_lines(&path, n, 20_000), whole_file_last_lines(&text, n, 20_000), "n={n}");
            }
        }
    }

    #[test]
    fn reads_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, vec![b'a'; 3 << 20]).unwrap();
        assert_eq!(read_from(&path, 1 << 20, MAX_READ).len(), 1 << 20);
        assert_eq!(read_from(&path, (3 << 20) - 5, MAX_READ).len(), 5);
        assert_eq!(read_tail(&path, 10).len(), 10);
        assert!(read_from(&dir.path().join("none"), 0, 10).is_empty());
    }
}

//! Byte layout of one serialized object, shared by inline blobs and shm files:
//!
//! ```text
//! "OXO1" | flags u32 | buffer count u32 | reserved u32 | pickle length u64
//! | (offset u64, length u64) per buffer | pickle bytes | buffers, each 64-byte aligned
//! ```
//! Buffers are the pickle protocol-5 out-of-band buffers, so readers can view
//! them in place (zero-copy) and aligned for numpy and Arrow.

use std::ops::Range;

const MAGIC: &[u8; 4] = b"OXO1";
const FIXED_HEADER: usize = 24;
pub const LAYOUT_ALIGN: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LayoutError {
    #[error("object data is {0} bytes, too short for an object header")]
    TooShort(usize),
    #[error("object data does not start with the oxray object magic")]
    BadMagic,
    #[error("object header points past the end of its {len} bytes ({what})")]
    OutOfBounds { what: &'static str, len: usize },
}

/// The flags of an object whose header starts `header` (at least its first 8
/// bytes); None when they are not an object header.
pub(crate) fn flags_of(header: &[u8]) -> Option<u32> {
    (header.len() >= 8 && &header[0..4] == MAGIC).then(|| u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")))
}

/// Where each part goes for a given pickle length and buffer lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub total_size: usize,
    pub pickle: Range<usize>,
    pub buffers: Vec<Range<usize>>,
}

fn align_up(n: usize) -> usize {
    n.div_ceil(LAYOUT_ALIGN) * LAYOUT_ALIGN
}

pub fn plan(pickle_len: usize, buffer_lens: &[usize]) -> Layout {
    let header = FIXED_HEADER + 16 * buffer_lens.len();
    let pickle = header..header + pickle_len;
    let mut cursor = pickle.end;
    let buffers = buffer_lens
        .iter()
        .map(|&len| {
            let start = align_up(cursor);
            cursor = start + len;
            start..cursor
        })
        .collect();
    Layout { total_size: cursor, pickle, buffers }
}

/// Writes header, pickle and buffers into `dst`, which must be `layout.total_size` long.
pub fn write_object(dst: &mut [u8], layout: &Layout, flags: u32, pickle: &[u8], buffers: &[&[u8]]) {
    assert_eq!(dst.len(), layout.total_size, "destination size must match the layout");
    dst[0..4].copy_from_slice(MAGIC);
    dst[4..8].copy_from_slice(&flags.to_le_bytes());
    dst[8..12].copy_from_slice(&(buffers.len() as u32).to_le_bytes());
    dst[12..16].copy_from_slice(&0u32.to_le_bytes());
    dst[16..24].copy_from_slice(&(pickle.len() as u64).to_le_bytes());
    for (i, range) in layout.buffers.iter().enumerate() {
        let at = FIXED_HEADER + 16 * i;
        dst[at..at + 8].copy_from_slice(&(range.start as u64).to_le_bytes());
        dst[at + 8..at + 16].copy_from_slice(&((range.end - range.start) as u64).to_le_bytes());
    }
    dst[layout.pickle.clone()].copy_from_slice(pickle);
    for (range, buf) in layout.buffers.iter().zip(buffers) {
        dst[range.clone()].copy_from_slice(buf);
    }
}

/// A parsed header: ranges into the same bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedObject {
    pub flags: u32,
    pub pickle: Range<usize>,
    pub buffers: Vec<Range<usize>>,
}

fn read_u64(src: &[u8], at: usize) -> usize {
    u64::from_le_bytes(src[at..at + 8].try_into().expect("8 bytes")) as usize
}

pub fn parse(src: &[u8]) -> Result<ParsedObject, LayoutError> {
    if src.len() < FIXED_HEADER {
        return Err(LayoutError::TooShort(src.len()));
    }
    if &src[0..4] != MAGIC {
        return Err(LayoutError::BadMagic);
    }
    let flags = u32::from_le_bytes(src[4..8].try_into().expect("4 bytes"));
    let count = u32::from_le_bytes(src[8..12].try_into().expect("4 bytes")) as usize;
    let pickle_len = read_u64(src, 16);
    let header = FIXED_HEADER + 16 * count;
    let oob = |what| LayoutError::OutOfBounds { what, len: src.len() };
    if header > src.len() {
        return Err(oob("buffer table"));
    }
    let pickle = header..header.checked_add(pickle_len).ok_or(oob("pickle"))?;
    if pickle.end > src.len() {
        return Err(oob("pickle"));
    }
    let mut buffers = Vec::with_capacity(count);
    for i in 0..count {
        let at = FIXED_HEADER + 16 * i;
        let start = read_u64(src, at);
        let end = start.checked_add(read_u64(src, at + 8)).ok_or(oob("buffer"))?;
        if end > src.len() {
            return Err(oob("buffer"));
        }
        buffers.push(start..end);
    }
    Ok(ParsedObject { flags, pickle, buffers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_bytes_and_aligns_buffers() {
        let pickle = b"pickled-bytes";
        let a = vec![7u8; 1000];
        let b = vec![9u8; 3];
        let layout = plan(pickle.len(), &[a.len(), b.len(), 0]);
        let mut dst = vec![0u8; layout.total_size];
        write_object(&mut dst, &layout, 5, pickle, &[&a, &b, &[]]);
        let parsed = parse(&dst).unwrap();
        assert_eq!(parsed.flags, 5);
        assert_eq!(flags_of(&dst), Some(5));
        assert_eq!(flags_of(b"NOPE0000"), None);
        assert_eq!(&dst[parsed.pickle.clone()], pickle);
        assert_eq!(&dst[parsed.buffers[0].clone()], &a[..]);
        assert_eq!(&dst[parsed.buffers[1].clone()], &b[..]);
        assert!(parsed.buffers[2].is_empty());
        for r in &parsed.buffers {
            assert_eq!(r.start % LAYOUT_ALIGN, 0);
        }
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert_eq!(parse(b"short"), Err(LayoutError::TooShort(5)));
        assert_eq!(parse(&[0u8; 64]), Err(LayoutError::BadMagic));
        let layout = plan(10, &[100]);
        let mut dst = vec![0u8; layout.total_size];
        write_object(&mut dst, &layout, 0, &[1; 10], &[&[2; 100]]);
        assert!(matches!(parse(&dst[..dst.len() - 1]), Err(LayoutError::OutOfBounds { .. })));
    }
}

//! Offsets in the node's shared-memory arena: best-fit allocation of page-sized
//! blocks, with neighbours merged on free so large objects keep finding room.

use std::collections::BTreeMap;

/// Allocation granularity: ranges start page-aligned, good for memcpy and numpy.
pub const ARENA_PAGE: usize = 4096;

#[derive(Debug)]
pub struct ArenaAllocator {
    size: usize,
    /// offset -> length of each free block
    free: BTreeMap<usize, usize>,
    used: usize,
}

pub(crate) fn round_up(len: usize) -> usize {
    len.max(1).div_ceil(ARENA_PAGE) * ARENA_PAGE
}

impl ArenaAllocator {
    pub fn new(size: usize) -> Self {
        let size = size / ARENA_PAGE * ARENA_PAGE;
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        ArenaAllocator { size, free, used: 0 }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn used(&self) -> usize {
        self.used
    }

    /// The offset of a block of at least `len` bytes, or None if no free block is big enough.
    pub fn alloc(&mut self, len: usize) -> Option<usize> {
        let len = round_up(len);
        let (&offset, &block) = self.free.iter().filter(|(_, b)| **b >= len).min_by_key(|(o, b)| (**b, **o))?;
        self.free.remove(&offset);
        if block > len {
            self.free.insert(offset + len, block - len);
        }
        self.used += len;
        Some(offset)
    }

    pub fn free(&mut self, offset: usize, len: usize) {
        let len = round_up(len);
        self.used -= len;
        let mut start = offset;
        let mut end = offset + len;
        if let Some((&prev, &prev_len)) = self.free.range(..offset).next_back()
            && prev + prev_len == offset
        {
            self.free.remove(&prev);
            start = prev;
        }
        if let Some(&next_len) = self.free.get(&end) {
            self.free.remove(&end);
            end += next_len;
        }
        self.free.insert(start, end - start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_and_coalescing() {
        let mut a = ArenaAllocator::new(16 * ARENA_PAGE);
        let x = a.alloc(4 * ARENA_PAGE).unwrap();
        let y = a.alloc(1).unwrap();
        let z = a.alloc(4 * ARENA_PAGE).unwrap();
        assert_eq!((x, y, z), (0, 4 * ARENA_PAGE, 5 * ARENA_PAGE));
        assert_eq!(a.used(), 9 * ARENA_PAGE);
        a.free(x, 4 * ARENA_PAGE);
        // A one-page request takes the smallest hole that fits, not the big tail.
        a.free(y, 1);
        assert_eq!(a.alloc(ARENA_PAGE), Some(0), "merged hole [0, 5 pages) is the best fit");
        assert!(a.alloc(12 * ARENA_PAGE).is_none());
        a.free(0, ARENA_PAGE);
        a.free(z, 4 * ARENA_PAGE);
        assert_eq!(a.used(), 0);
        assert_eq!(a.alloc(16 * ARENA_PAGE), Some(0), "everything merged back into one block");
    }

    #[test]
    fn repeated_same_size_allocations_reuse_the_same_range() {
        let mut a = ArenaAllocator::new(64 * ARENA_PAGE);
        let first = a.alloc(10 * ARENA_PAGE).unwrap();
        a.free(first, 10 * ARENA_PAGE);
        for _ in 0..100 {
            let again = a.alloc(10 * ARENA_PAGE).unwrap();
            assert_eq!(again, first, "warm pages are reused");
            a.free(again, 10 * ARENA_PAGE);
        }
    }
}

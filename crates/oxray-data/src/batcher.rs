//! Rebatching: cutting a stream of record batches into batches of exactly
//! `batch_size` rows (zero-copy slices; a copy only when a batch spans
//! inputs), optionally drawn at random from a seeded local shuffle buffer.

use crate::error::{DataError, Result};
use crate::schema::merge_schemas;
use arrow_array::{RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::SchemaRef;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use std::collections::VecDeque;

/// Concatenates batches with the same columns (names and types) into one.
pub fn concat_batches(batches: &[RecordBatch]) -> Result<RecordBatch> {
    let Some(first) = batches.first() else {
        return Err(DataError::invalid("batches", "[]", "at least one record batch"));
    };
    let mut schema = first.schema();
    for (i, batch) in batches.iter().enumerate().skip(1) {
        schema = merge_schemas(&schema, batch.schema_ref()).map_err(|difference| DataError::BatchSchemaMismatch {
            what: "record batch schemas",
            difference: format!("batch {i} against batch 0: {difference}"),
        })?;
    }
    if batches.len() == 1 {
        return Ok(first.clone());
    }
    arrow_select::concat::concat_batches(&schema, batches)
        .map_err(DataError::arrow("cannot concatenate record batches"))
}

/// The local shuffle buffer: rows are drawn from `shuffled` (a random
/// permutation of everything buffered when it was made) from `offset` on.
struct Shuffle {
    buffer_size: usize,
    rng: StdRng,
    shuffled: Option<RecordBatch>,
    offset: usize,
}

impl Shuffle {
    fn remaining(&self) -> usize {
        self.shuffled.as_ref().map_or(0, |b| b.num_rows() - self.offset)
    }
}

/// Cuts added batches into batches of `batch_size` rows (or passes each
/// through whole when `batch_size` is `None`).
pub struct Batcher {
    batch_size: Option<usize>,
    drop_last: bool,
    shuffle: Option<Shuffle>,
    schema: Option<SchemaRef>,
    pending: VecDeque<RecordBatch>,
    pending_rows: usize,
    finished: bool,
}

fn positive(name: &'static str, value: i64) -> Result<usize> {
    if value <= 0 {
        return Err(DataError::invalid(name, value, "a positive number of rows"));
    }
    Ok(value as usize)
}

impl Batcher {
    pub fn new(
        batch_size: Option<i64>,
        drop_last: bool,
        shuffle_buffer_size: Option<i64>,
        seed: Option<u64>,
    ) -> Result<Batcher> {
        let batch_size = batch_size.map(|b| positive("batch_size", b)).transpose()?;
        let shuffle = match shuffle_buffer_size {
            None => None,
            Some(size) => {
                let buffer_size = positive("shuffle_buffer_size", size)?;
                if batch_size.is_none() {
                    return Err(DataError::invalid(
                        "batch_size",
                        "None",
                        "a batch size when a local shuffle buffer is used",
                    ));
                }
                let rng = match seed {
                    Some(seed) => StdRng::seed_from_u64(seed),
                    None => StdRng::from_rng(&mut rand::rng()),
                };
                Some(Shuffle { buffer_size, rng, shuffled: None, offset: 0 })
            }
        };
        Ok(Batcher {
            batch_size,
            drop_last,
            shuffle,
            schema: None,
            pending: VecDeque::new(),
            pending_rows: 0,
            finished: false,
        })
    }

    /// Adds a batch; its columns must match the earlier ones'.
    pub fn add(&mut self, batch: RecordBatch) -> Result<()> {
        if self.finished {
            return Err(DataError::invalid("add", "after finish()", "batches added before finish()"));
        }
        self.schema = Some(match &self.schema {
            None => batch.schema(),
            Some(schema) => merge_schemas(schema, batch.schema_ref()).map_err(|difference| {
                DataError::BatchSchemaMismatch { what: "the added batch's columns and the earlier ones", difference }
            })?,
        });
        if batch.num_rows() > 0 {
            self.pending_rows += batch.num_rows();
            self.pending.push_back(batch);
        }
        Ok(())
    }

    /// Marks the end of the input: `next_batch` then drains what is left.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// Rows buffered and not yet returned.
    pub fn buffered_rows(&self) -> usize {
        self.pending_rows + self.shuffle.as_ref().map_or(0, Shuffle::remaining)
    }

    /// The next batch when one is ready.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let Some(batch_size) = self.batch_size else {
            self.pending_rows -= self.pending.front().map_or(0, RecordBatch::num_rows);
            return Ok(self.pending.pop_front());
        };
        let buffered = self.buffered_rows();
        let rows = if buffered >= batch_size {
            batch_size
        } else if self.finished && buffered > 0 && !self.drop_last {
            buffered
        } else {
            return Ok(None);
        };
        if self.shuffle.is_some() {
            return self.next_shuffled(rows);
        }
        self.take_pending(rows).map(Some)
    }

    /// The first `rows` pending rows: a slice when one input holds them all.
    fn take_pending(&mut self, rows: usize) -> Result<RecordBatch> {
        let mut parts = Vec::new();
        let mut needed = rows;
        while needed > 0 {
            let front = self.pending.pop_front().expect("enough rows are pending");
            if front.num_rows() > needed {
                parts.push(front.slice(0, needed));
                self.pending.push_front(front.slice(needed, front.num_rows() - needed));
                needed = 0;
            } else {
                needed -= front.num_rows();
                parts.push(front);
            }
        }
        self.pending_rows -= rows;
        if parts.len() == 1 {
            return Ok(parts.pop().expect("one part"));
        }
        let schema = self.schema.clone().expect("a batch was added");
        arrow_select::concat::concat_batches(&schema, &parts)
            .map_err(DataError::arrow("cannot concatenate record batches"))
    }

    fn next_shuffled(&mut self, rows: usize) -> Result<Option<RecordBatch>> {
        let buffered = self.buffered_rows();
        let shuffle = self.shuffle.as_ref().expect("shuffling");
        // Hold rows until the buffer is full, so each batch is drawn from many inputs.
        if !self.finished && buffered < shuffle.buffer_size {
            return Ok(None);
        }
        if self.pending_rows > 0 {
            self.reshuffle()?;
        }
        let shuffle = self.shuffle.as_mut().expect("shuffling");
        let shuffled = shuffle.shuffled.as_ref().expect("rows are buffered");
        let out = shuffled.slice(shuffle.offset, rows);
        shuffle.offset += rows;
        Ok(Some(out))
    }

    /// Merges new rows into the buffer and permutes it, so the next batches
    /// are a draw without replacement from everything buffered.
    fn reshuffle(&mut self) -> Result<()> {
        let schema = self.schema.clone().expect("a batch was added");
        let shuffle = self.shuffle.as_mut().expect("shuffling");
        let mut parts: Vec<RecordBatch> = Vec::with_capacity(self.pending.len() + 1);
        if let Some(old) = shuffle.shuffled.take()
            && shuffle.offset < old.num_rows()
        {
            parts.push(old.slice(shuffle.offset, old.num_rows() - shuffle.offset));
        }
        parts.extend(self.pending.drain(..));
        self.pending_rows = 0;
        let all = if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            arrow_select::concat::concat_batches(&schema, &parts)
                .map_err(DataError::arrow("cannot fill the shuffle buffer"))?
        };
        let n = all.num_rows();
        let permuted = if n <= u32::MAX as usize {
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.shuffle(&mut shuffle.rng);
            arrow_select::take::take_record_batch(&all, &UInt32Array::from(order))
        } else {
            let mut order: Vec<u64> = (0..n as u64).collect();
            order.shuffle(&mut shuffle.rng);
            arrow_select::take::take_record_batch(&all, &UInt64Array::from(order))
        }
        .map_err(DataError::arrow("cannot shuffle the buffer"))?;
        shuffle.shuffled = Some(permuted);
        shuffle.offset = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{column_a, rows};

    fn drain(batcher: &mut Batcher) -> Vec<RecordBatch> {
        std::iter::from_fn(|| batcher.next_batch().unwrap()).collect()
    }

    /// Inputs of uneven sizes covering rows 0..1000.
    fn uneven() -> Vec<RecordBatch> {
        let cuts = [0, 7, 300, 301, 650, 1000];
        cuts.windows(2).map(|w| rows(w[0], w[1])).collect()
    }

    #[test]
    fn batches_are_exact_and_the_last_is_partial_unless_dropped() {
        for drop_last in [false, true] {
            let mut batcher = Batcher::new(Some(128), drop_last, None, None).unwrap();
            let mut out = Vec::new();
            for batch in uneven() {
                batcher.add(batch).unwrap();
                out.extend(drain(&mut batcher));
            }
            assert!(out.iter().all(|b| b.num_rows() == 128), "full batches only before finish");
            batcher.finish();
            out.extend(drain(&mut batcher));
            let sizes: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
            let expected_len = if drop_last { 896 } else { 1000 };
            assert_eq!(column_a(&out), (0..expected_len).collect::<Vec<_>>());
            assert_eq!(sizes.last(), Some(if drop_last { &128 } else { &104 }));
        }
    }

    #[test]
    fn a_batch_inside_one_input_is_a_zero_copy_slice() {
        let input = rows(0, 1000);
        let mut batcher = Batcher::new(Some(100), false, None, None).unwrap();
        batcher.add(input.clone()).unwrap();
        let second = {
            batcher.next_batch().unwrap().unwrap();
            batcher.next_batch().unwrap().unwrap()
        };
        let values = |b: &RecordBatch| b.column(0).to_data().buffers()[0].as_ptr();
        // Rows 100..200 of the input's own values buffer (8-byte int64s), not a copy.
        assert_eq!(values(&second), values(&input).wrapping_add(100 * 8), "the slice shares the input's buffer");
    }

    #[test]
    fn no_batch_size_passes_batches_through_whole() {
        let mut batcher = Batcher::new(None, false, None, None).unwrap();
        for batch in uneven() {
            batcher.add(batch).unwrap();
        }
        let sizes: Vec<usize> = drain(&mut batcher).iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [7, 293, 1, 349, 350]);
    }

    fn shuffled(seed: Option<u64>) -> Vec<i64> {
        let mut batcher = Batcher::new(Some(64), false, Some(256), seed).unwrap();
        let mut out = Vec::new();
        for batch in uneven() {
            batcher.add(batch).unwrap();
            let ready = drain(&mut batcher);
            assert!(ready.iter().all(|b| b.num_rows() == 64));
            out.extend(ready);
        }
        batcher.finish();
        out.extend(drain(&mut batcher));
        column_a(&out)
    }

    #[test]
    fn shuffling_is_a_seeded_permutation() {
        let first = shuffled(Some(7));
        assert_eq!(first, shuffled(Some(7)), "same seed, same order");
        assert_ne!(first, shuffled(Some(8)), "another seed, another order");
        assert_ne!(first, (0..1000).collect::<Vec<_>>());
        let mut sorted = first.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>(), "every row exactly once");
        // Rows are held until the buffer is full: the first batch draws from the first 256+ rows.
        assert!(first[..64].iter().any(|&a| a >= 64), "{:?}", &first[..64]);
    }

    #[test]
    fn bad_sizes_and_mismatched_batches_are_refused() {
        for (size, buffer) in [(Some(0), None), (Some(-3), None), (Some(10), Some(0))] {
            let err = Batcher::new(size, false, buffer, None).err().unwrap().to_string();
            assert!(err.contains("is invalid") && err.contains("positive"), "{err}");
        }
        let err = Batcher::new(None, false, Some(10), None).err().unwrap().to_string();
        assert!(err.contains("batch_size=None"), "{err}");
        let mut batcher = Batcher::new(Some(10), false, None, None).unwrap();
        batcher.add(rows(0, 5)).unwrap();
        let other = rows(0, 5).project(&[1, 0, 2]).unwrap();
        let err = batcher.add(other).unwrap_err().to_string();
        assert!(err.contains("`a: Int64`") && err.contains("`b: Float32`"), "{err}");
        let err = concat_batches(&[rows(0, 5), rows(0, 5).project(&[0]).unwrap()]).unwrap_err().to_string();
        assert!(err.contains("batch 1") && err.contains("`b: Float32`"), "{err}");
        let joined = concat_batches(&[rows(0, 5), rows(5, 12)]).unwrap();
        assert_eq!(column_a(&[joined]), (0..12).collect::<Vec<_>>());
    }
}

//! Parquet: reading footers (`inspect_parquet`), one fragment with projection,
//! row-group selection and a row limit pushed into the decoder
//! (`FragmentReader`, `read_parquet`), and `ParquetStream`, which decodes
//! several fragments ahead on its own threads while the decoded bytes waiting
//! for the consumer stay under a budget.

use crate::error::{DataError, Result};
use crate::schema::merge_schemas;
use crate::source::{Location, block_on, object_path};
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryFutureExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::{Condvar, Mutex};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderBuilder, ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStream, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

/// A parquet error while reading `path`'s data; remote failures keep their cause.
fn data_error(path: &str, e: ParquetError) -> DataError {
    match e {
        ParquetError::External(inner) => match inner.downcast::<object_store::Error>() {
            Ok(remote) => DataError::remote("cannot read", path)(*remote),
            Err(other) => DataError::BadParquet { path: path.to_string(), reason: other.to_string() },
        },
        other => DataError::BadParquet { path: path.to_string(), reason: other.to_string() },
    }
}

/// A parquet error while reading `path`'s footer: the file is not parquet,
/// unless the failure was the network's.
fn footer_error(path: &str, e: ParquetError) -> DataError {
    match data_error(path, e) {
        DataError::BadParquet { path, reason } => DataError::NotParquet { path, reason },
        other => other,
    }
}

/// An S3 object read by ranges (the parquet reader coalesces them).
struct ObjectReader {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    size: u64,
}

fn external(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for ObjectReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.store.get_range(&self.path, range).map_err(external).boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move { self.store.get_ranges(&self.path, &ranges).await.map_err(external) }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            let metadata =
                ParquetMetaDataReader::new().with_arrow_reader_options(options).load_and_finish(self, size).await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

/// An open file: a local `File` or an S3 object.
enum Opened {
    Local(std::fs::File),
    Remote(ObjectReader),
}

fn open(uri: &str) -> Result<Opened> {
    match Location::parse(uri)? {
        Location::Local(path) => {
            let file = std::fs::File::open(&path).map_err(DataError::io("cannot open", uri))?;
            if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
                return Err(DataError::NotParquet { path: uri.to_string(), reason: "it is a directory".into() });
            }
            Ok(Opened::Local(file))
        }
        Location::S3 { store, key, .. } => {
            let path = object_path(uri, &key)?;
            let meta = block_on(store.head(&path)).map_err(DataError::remote("cannot open", uri))?;
            Ok(Opened::Remote(ObjectReader { store, path, size: meta.size }))
        }
    }
}

/// The footer of `uri`: its arrow schema and row groups.
fn load_metadata(uri: &str) -> Result<ArrowReaderMetadata> {
    match open(uri)? {
        Opened::Local(file) => {
            ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(|e| footer_error(uri, e))
        }
        Opened::Remote(mut reader) => block_on(ArrowReaderMetadata::load_async(&mut reader, ArrowReaderOptions::new()))
            .map_err(|e| footer_error(uri, e)),
    }
}

/// Rows and uncompressed bytes of each row group of each file.
pub type RowGroupSizes = Vec<Vec<(u64, u64)>>;

/// Reads the footers of `uris` (in parallel) and returns the dataset's schema
/// and, per file, `(num_rows, uncompressed bytes)` of each row group. Files
/// must agree on column names and types.
pub fn inspect_parquet(uris: &[String]) -> Result<(SchemaRef, RowGroupSizes)> {
    if uris.is_empty() {
        return Err(DataError::invalid("uris", "[]", "at least one parquet file"));
    }
    let next = AtomicUsize::new(0);
    let threads = uris.len().min(8);
    let mut loaded: Vec<Option<Result<ArrowReaderMetadata>>> = (0..uris.len()).map(|_| None).collect();
    let results = Mutex::new(&mut loaded);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= uris.len() {
                        break;
                    }
                    let meta = load_metadata(&uris[i]);
                    results.lock()[i] = Some(meta);
                }
            });
        }
    });
    let mut schema: Option<SchemaRef> = None;
    let mut sizes = Vec::with_capacity(uris.len());
    for (uri, meta) in uris.iter().zip(loaded) {
        let meta = meta.expect("every file was inspected")?;
        schema =
            Some(match schema {
                None => meta.schema().clone(),
                Some(first) => merge_schemas(&first, meta.schema()).map_err(|difference| {
                    DataError::SchemaMismatch { first: uris[0].clone(), other: uri.clone(), difference }
                })?,
            });
        let groups = meta.metadata().row_groups();
        sizes.push(groups.iter().map(|g| (g.num_rows() as u64, g.total_byte_size() as u64)).collect());
    }
    Ok((schema.expect("at least one file"), sizes))
}

/// What to read of a file.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Row groups, in this order; all when `None`.
    pub row_groups: Option<Vec<usize>>,
    /// Columns, in this order; all when `None`.
    pub columns: Option<Vec<String>>,
    /// Stop after this many rows.
    pub limit: Option<usize>,
    /// Rows per batch.
    pub batch_size: usize,
}

fn check_batch_size(batch_size: usize) -> Result<()> {
    if batch_size == 0 {
        return Err(DataError::invalid("batch_size", 0, "a positive number of rows"));
    }
    Ok(())
}

/// Applies projection, row groups and limit to a reader builder (sync or
/// async); returns the builder and the column order to restore, when the
/// requested order differs from the file's.
fn configure<T>(
    uri: &str,
    mut builder: ArrowReaderBuilder<T>,
    options: &ReadOptions,
) -> Result<(ArrowReaderBuilder<T>, Option<Vec<usize>>)> {
    let num_groups = builder.metadata().num_row_groups();
    let mut groups: Vec<usize> = match &options.row_groups {
        Some(groups) => {
            if let Some(bad) = groups.iter().find(|&&g| g >= num_groups) {
                return Err(DataError::invalid(
                    "row_groups",
                    bad,
                    format!("a row group index below {num_groups} (the row groups of {uri})"),
                ));
            }
            groups.clone()
        }
        None => (0..num_groups).collect(),
    };
    if let Some(limit) = options.limit {
        // Row groups past the limit are not even opened.
        let mut rows = 0usize;
        let keep = groups
            .iter()
            .take_while(|&&g| {
                let before = rows;
                rows += builder.metadata().row_group(g).num_rows() as usize;
                before < limit
            })
            .count();
        groups.truncate(keep);
        builder = builder.with_limit(limit);
    }
    let mut reorder = None;
    if let Some(columns) = &options.columns {
        let schema = builder.schema().clone();
        let mut indices = Vec::with_capacity(columns.len());
        for name in columns {
            let index = schema.index_of(name).map_err(|_| DataError::UnknownColumn {
                column: name.clone(),
                path: uri.to_string(),
                available: schema.fields().iter().map(|f| f.name().clone()).collect(),
            })?;
            indices.push(index);
        }
        let mut in_file_order = indices.clone();
        in_file_order.sort_unstable();
        in_file_order.dedup();
        let order: Vec<usize> =
            indices.iter().map(|i| in_file_order.binary_search(i).expect("index is in the projection")).collect();
        if order.iter().enumerate().any(|(pos, &i)| pos != i) || order.len() != in_file_order.len() {
            reorder = Some(order);
        }
        let mask = ProjectionMask::roots(builder.parquet_schema(), in_file_order);
        builder = builder.with_projection(mask);
    }
    Ok((builder.with_row_groups(groups).with_batch_size(options.batch_size), reorder))
}

/// Runs a step of the parquet decoder, turning a panic on a malformed file
/// into an error naming the file (a stream's consumer would otherwise wait
/// forever for a fragment whose thread died).
fn catch_decoder_panic<T>(uri: &str, step: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)).unwrap_or_else(|panic| {
        let reason = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the decoder panicked".to_string());
        Err(DataError::BadParquet { path: uri.to_string(), reason: format!("malformed data: {reason}") })
    })
}

enum Decoder {
    Local(ParquetRecordBatchReader),
    Remote(Box<ParquetRecordBatchStream<ObjectReader>>),
    Empty,
}

/// Decodes one fragment (a file, or some of its row groups) batch by batch.
pub struct FragmentReader {
    uri: String,
    decoder: Decoder,
    reorder: Option<Vec<usize>>,
}

impl FragmentReader {
    pub fn open(uri: &str, options: &ReadOptions) -> Result<FragmentReader> {
        check_batch_size(options.batch_size)?;
        if options.limit == Some(0) {
            return Ok(FragmentReader { uri: uri.to_string(), decoder: Decoder::Empty, reorder: None });
        }
        catch_decoder_panic(uri, || FragmentReader::open_decoder(uri, options))
    }

    fn open_decoder(uri: &str, options: &ReadOptions) -> Result<FragmentReader> {
        let (decoder, reorder) = match open(uri)? {
            Opened::Local(file) => {
                let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| footer_error(uri, e))?;
                let (builder, reorder) = configure(uri, builder, options)?;
                (Decoder::Local(builder.build().map_err(|e| data_error(uri, e))?), reorder)
            }
            Opened::Remote(reader) => {
                let builder =
                    block_on(ParquetRecordBatchStreamBuilder::new(reader)).map_err(|e| footer_error(uri, e))?;
                let (builder, reorder) = configure(uri, builder, options)?;
                (Decoder::Remote(Box::new(builder.build().map_err(|e| data_error(uri, e))?)), reorder)
            }
        };
        Ok(FragmentReader { uri: uri.to_string(), decoder, reorder })
    }
}

impl Iterator for FragmentReader {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let uri = &self.uri;
        let decoder = &mut self.decoder;
        let next = catch_decoder_panic(uri, || {
            Ok(match decoder {
                Decoder::Local(reader) => reader.next().map(|b| b.map_err(|e| data_error(uri, e.into()))),
                Decoder::Remote(stream) => block_on(stream.next()).map(|b| b.map_err(|e| data_error(uri, e))),
                Decoder::Empty => None,
            })
        });
        let next = match next {
            Ok(next) => next,
            Err(e) => {
                self.decoder = Decoder::Empty;
                Some(Err(e))
            }
        };
        match (next, &self.reorder) {
            (Some(Ok(batch)), Some(order)) => Some(
                batch.project(order).map_err(DataError::arrow(format!("cannot reorder the columns of {}", self.uri))),
            ),
            (next, _) => next,
        }
    }
}

/// Reads one fragment whole: the batches of `uri`'s chosen row groups and columns, up to `limit` rows.
pub fn read_parquet(uri: &str, options: &ReadOptions) -> Result<Vec<RecordBatch>> {
    FragmentReader::open(uri, options)?.collect()
}

/// How a `ParquetStream` reads its fragments.
#[derive(Clone, Debug)]
pub struct StreamOptions {
    pub columns: Option<Vec<String>>,
    /// Rows over the whole stream.
    pub limit: Option<usize>,
    pub batch_size: usize,
    /// Fragments decoded at once (and at most this many ahead of the consumer).
    pub threads: usize,
    /// Decoded bytes waiting for the consumer above which no fragment but the
    /// one the consumer reads decodes more.
    pub max_bytes_in_flight: usize,
}

#[derive(Default)]
struct Slot {
    batches: VecDeque<(RecordBatch, usize)>,
    finished: bool,
    error: Option<DataError>,
}

struct State {
    next_to_claim: usize,
    consuming: usize,
    slots: Vec<Slot>,
    bytes_in_flight: usize,
    peak_bytes_in_flight: usize,
    stop: bool,
}

struct Shared {
    fragments: Vec<(String, Option<Vec<usize>>)>,
    options: StreamOptions,
    state: Mutex<State>,
    /// Workers wait here for a fragment to claim or room in the budget.
    work: Condvar,
    /// The consumer waits here for its fragment's next batch.
    data: Condvar,
}

/// Batches of many fragments in fragment order, decoded ahead in parallel on
/// the stream's threads. Dropping it stops and joins them.
pub struct ParquetStream {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    emitted: usize,
    done: bool,
}

impl ParquetStream {
    pub fn new(fragments: Vec<(String, Option<Vec<usize>>)>, options: StreamOptions) -> Result<ParquetStream> {
        check_batch_size(options.batch_size)?;
        if options.threads == 0 {
            return Err(DataError::invalid("threads", 0, "at least 1 decoding thread"));
        }
        // A limit of 0 reads nothing: no thread starts.
        let threads = if options.limit == Some(0) { 0 } else { options.threads.min(fragments.len()) };
        let slots = (0..fragments.len()).map(|_| Slot::default()).collect();
        let shared = Arc::new(Shared {
            fragments,
            options,
            state: Mutex::new(State {
                next_to_claim: 0,
                consuming: 0,
                slots,
                bytes_in_flight: 0,
                peak_bytes_in_flight: 0,
                stop: false,
            }),
            work: Condvar::new(),
            data: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("oxray-parquet-{i}"))
                .spawn(move || decode_fragments(&shared))
                .map_err(DataError::io("cannot start a decoding thread for", "the parquet stream"))?;
            workers.push(spawned);
        }
        Ok(ParquetStream { shared, workers, emitted: 0, done: threads == 0 })
    }

    /// Decoded bytes not yet taken by the consumer.
    pub fn bytes_in_flight(&self) -> usize {
        self.shared.state.lock().bytes_in_flight
    }

    /// The most decoded bytes that ever waited for the consumer.
    pub fn peak_bytes_in_flight(&self) -> usize {
        self.shared.state.lock().peak_bytes_in_flight
    }

    fn stop(&mut self) {
        self.done = true;
        self.shared.state.lock().stop = true;
        self.shared.work.notify_all();
    }
}

/// Marks a worker's fragment failed if the worker panics, so the consumer
/// gets an error instead of waiting forever.
struct FailFragmentOnPanic<'a> {
    shared: &'a Shared,
    index: usize,
}

impl Drop for FailFragmentOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut state = self.shared.state.lock();
            let slot = &mut state.slots[self.index];
            slot.error = Some(DataError::BadParquet {
                path: self.shared.fragments[self.index].0.clone(),
                reason: "the decoding thread panicked".into(),
            });
            slot.finished = true;
            self.shared.data.notify_all();
        }
    }
}

/// A worker: claims the next fragment within the window ahead of the
/// consumer, decodes it batch by batch while the budget allows, repeats.
fn decode_fragments(shared: &Shared) {
    let options = &shared.options;
    loop {
        let index = {
            let mut state = shared.state.lock();
            loop {
                if state.stop || state.next_to_claim >= shared.fragments.len() {
                    return;
                }
                if state.next_to_claim < state.consuming + options.threads {
                    state.next_to_claim += 1;
                    break state.next_to_claim - 1;
                }
                shared.work.wait(&mut state);
            }
        };
        let _unwinding = FailFragmentOnPanic { shared, index };
        let (uri, row_groups) = &shared.fragments[index];
        let read = ReadOptions {
            row_groups: row_groups.clone(),
            columns: options.columns.clone(),
            limit: options.limit,
            batch_size: options.batch_size,
        };
        let mut reader = match FragmentReader::open(uri, &read) {
            Ok(reader) => Some(reader),
            Err(e) => {
                let mut state = shared.state.lock();
                state.slots[index].error = Some(e);
                state.slots[index].finished = true;
                shared.data.notify_all();
                None
            }
        };
        while let Some(decoding) = reader.as_mut() {
            {
                let mut state = shared.state.lock();
                loop {
                    if state.stop {
                        return;
                    }
                    // Over budget, only the fragment the consumer waits on decodes, so the stream never stalls.
                    let starving = index == state.consuming && state.slots[index].batches.is_empty();
                    if starving || state.bytes_in_flight < options.max_bytes_in_flight {
                        break;
                    }
                    shared.work.wait(&mut state);
                }
            }
            let next = decoding.next();
            let mut state = shared.state.lock();
            match next {
                Some(Ok(batch)) => {
                    let size = batch.get_array_memory_size();
                    state.bytes_in_flight += size;
                    state.peak_bytes_in_flight = state.peak_bytes_in_flight.max(state.bytes_in_flight);
                    state.slots[index].batches.push_back((batch, size));
                }
                Some(Err(e)) => {
                    state.slots[index].error = Some(e);
                    state.slots[index].finished = true;
                    reader = None;
                }
                None => {
                    state.slots[index].finished = true;
                    reader = None;
                }
            }
            shared.data.notify_all();
        }
    }
}

impl Iterator for ParquetStream {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let limit = self.shared.options.limit;
        let mut state = self.shared.state.lock();
        loop {
            let current = state.consuming;
            if current >= self.shared.fragments.len() {
                drop(state);
                self.stop();
                return None;
            }
            let slot = &mut state.slots[current];
            if let Some((batch, size)) = slot.batches.pop_front() {
                state.bytes_in_flight -= size;
                drop(state);
                self.shared.work.notify_all();
                let batch = match limit {
                    Some(limit) if self.emitted + batch.num_rows() >= limit => {
                        self.stop();
                        batch.slice(0, limit - self.emitted)
                    }
                    _ => batch,
                };
                self.emitted += batch.num_rows();
                return Some(Ok(batch));
            }
            if let Some(e) = slot.error.take() {
                drop(state);
                self.stop();
                return Some(Err(e));
            }
            if slot.finished {
                state.slots[current] = Slot::default();
                state.consuming += 1;
                self.shared.work.notify_all();
                continue;
            }
            self.shared.data.wait(&mut state);
        }
    }
}

impl Drop for ParquetStream {
    fn drop(&mut self) {
        self.stop();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{column_a, rows, write_parquet_file};

    fn options(batch_size: usize) -> ReadOptions {
        ReadOptions { batch_size, ..Default::default() }
    }

    /// A file of rows 0..300 in three row groups of 100.
    fn three_groups(dir: &std::path::Path) -> String {
        let path = dir.join("three.parquet");
        write_parquet_file(&path, &rows(0, 300), 100);
        path.display().to_string()
    }

    #[test]
    fn inspect_reads_row_groups_and_schema_from_the_footer() {
        let dir = tempfile::tempdir().unwrap();
        let uri = three_groups(dir.path());
        let other = dir.path().join("other.parquet");
        write_parquet_file(&other, &rows(0, 50), 1000);
        let (schema, groups) = inspect_parquet(&[uri, other.display().to_string()]).unwrap();
        let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let counts: Vec<Vec<u64>> = groups.iter().map(|g| g.iter().map(|(rows, _)| *rows).collect()).collect();
        assert_eq!(counts, vec![vec![100, 100, 100], vec![50]]);
        assert!(groups[0].iter().all(|(_, bytes)| *bytes > 0));
    }

    #[test]
    fn read_pushes_columns_row_groups_and_limit_into_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let uri = three_groups(dir.path());
        let all = read_parquet(&uri, &options(64)).unwrap();
        assert_eq!(column_a(&all), (0..300).collect::<Vec<_>>());
        assert!(all.iter().all(|b| b.num_rows() <= 64));

        let projected = ReadOptions { columns: Some(vec!["c".into(), "a".into()]), ..options(1000) };
        let batches = read_parquet(&uri, &projected).unwrap();
        let names: Vec<_> = batches[0].schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["c", "a"], "columns come in the requested order");

        let limited = ReadOptions { limit: Some(150), ..options(1000) };
        assert_eq!(column_a(&read_parquet(&uri, &limited).unwrap()), (0..150).collect::<Vec<_>>());

        let groups = ReadOptions { row_groups: Some(vec![2, 0]), limit: Some(120), ..options(1000) };
        let expected: Vec<i64> = (200..300).chain(0..20).collect();
        assert_eq!(column_a(&read_parquet(&uri, &groups).unwrap()), expected);

        let none = ReadOptions { limit: Some(0), ..options(10) };
        assert!(read_parquet(&uri, &none).unwrap().is_empty());
    }

    #[test]
    fn bad_inputs_name_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let uri = three_groups(dir.path());
        let unknown = ReadOptions { columns: Some(vec!["zz".into()]), ..options(10) };
        let err = read_parquet(&uri, &unknown).unwrap_err().to_string();
        assert!(err.contains("\"zz\"") && err.contains(&uri) && err.contains("\"a\""), "{err}");

        let bad_group = ReadOptions { row_groups: Some(vec![3]), ..options(10) };
        let err = read_parquet(&uri, &bad_group).unwrap_err().to_string();
        assert!(err.contains("row_groups=3") && err.contains("below 3"), "{err}");

        let err = read_parquet(&uri, &options(0)).unwrap_err().to_string();
        assert!(err.contains("batch_size=0"), "{err}");

        let text = dir.path().join("notes.parquet");
        std::fs::write(&text, "not parquet at all, just some text").unwrap();
        let text = text.display().to_string();
        let err = inspect_parquet(std::slice::from_ref(&text)).unwrap_err();
        assert!(matches!(err, DataError::NotParquet { .. }), "{err:?}");
        assert!(err.to_string().contains(&format!("{text} is not a parquet file")), "{err}");
        assert!(matches!(read_parquet(&text, &options(10)), Err(DataError::NotParquet { .. })));

        let missing = dir.path().join("missing.parquet").display().to_string();
        let err = inspect_parquet(std::slice::from_ref(&missing)).unwrap_err();
        assert!(err.is_not_found() && err.to_string().contains(&missing), "{err}");
    }

    #[test]
    fn schema_mismatch_names_both_files_and_the_column() {
        let dir = tempfile::tempdir().unwrap();
        let first = three_groups(dir.path());
        let other = dir.path().join("other.parquet");
        let b: arrow_array::ArrayRef = Arc::new(arrow_array::Int32Array::from(vec![1, 2]));
        let a: arrow_array::ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![1, 2]));
        write_parquet_file(&other, &RecordBatch::try_from_iter([("a", a), ("b", b)]).unwrap(), 10);
        let other = other.display().to_string();
        let err = inspect_parquet(&[first.clone(), other.clone()]).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, DataError::SchemaMismatch { .. }), "{err:?}");
        assert!(message.contains(&first) && message.contains(&other), "{message}");
        assert!(message.contains("`b: Float32`") && message.contains("`b: Int32`"), "{message}");
    }

    #[test]
    fn corrupt_pages_are_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let uri = three_groups(dir.path());
        let mut bytes = std::fs::read(&uri).unwrap();
        bytes[4..68].fill(0xff); // the first page header, right after the magic "PAR1"
        std::fs::write(&uri, bytes).unwrap();
        let err = read_parquet(&uri, &options(1000)).unwrap_err();
        assert!(matches!(err, DataError::BadParquet { .. }), "{err:?}");
        assert!(err.to_string().contains(&uri), "{err}");
        let streamed: Vec<_> = ParquetStream::new(vec![(uri, None)], stream_options(None, 1, 0)).unwrap().collect();
        assert!(matches!(streamed.last(), Some(Err(DataError::BadParquet { .. }))), "{streamed:?}");
    }

    #[test]
    fn a_decoder_panic_becomes_an_error_naming_the_file() {
        let caught = catch_decoder_panic::<()>("/data/bad.parquet", || panic!("index out of bounds"));
        let err = caught.unwrap_err();
        assert!(matches!(err, DataError::BadParquet { .. }), "{err:?}");
        assert!(err.to_string().contains("/data/bad.parquet") && err.to_string().contains("index out of bounds"));
    }

    fn fragments(uris: &[&str]) -> Vec<(String, Option<Vec<usize>>)> {
        uris.iter().map(|u| (u.to_string(), None)).collect()
    }

    fn stream_options(limit: Option<usize>, threads: usize, max_bytes: usize) -> StreamOptions {
        StreamOptions { columns: None, limit, batch_size: 32, threads, max_bytes_in_flight: max_bytes }
    }

    #[test]
    fn stream_keeps_fragment_order_and_the_limit_over_the_whole_stream() {
        let dir = tempfile::tempdir().unwrap();
        let mut uris = Vec::new();
        for i in 0..5 {
            let path = dir.path().join(format!("part-{i}.parquet"));
            write_parquet_file(&path, &rows(i * 100, i * 100 + 100), 40);
            uris.push(path.display().to_string());
        }
        let names: Vec<&str> = uris.iter().map(String::as_str).collect();
        let mut with_groups = fragments(&names);
        with_groups[1].1 = Some(vec![2, 0]);
        let batches: Vec<_> =
            ParquetStream::new(with_groups, stream_options(None, 3, 1 << 30)).unwrap().collect::<Result<_>>().unwrap();
        let expected: Vec<i64> = (0..100).chain(180..200).chain(100..140).chain(200..500).collect();
        assert_eq!(column_a(&batches), expected);

        // A budget of zero bytes still makes progress: the consumer's fragment always decodes.
        let limited: Vec<_> = ParquetStream::new(fragments(&names), stream_options(Some(250), 2, 0))
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(column_a(&limited), (0..250).collect::<Vec<_>>());
    }

    #[test]
    fn stream_stays_within_its_budget_and_stops_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut uris = Vec::new();
        for i in 0..4 {
            let path = dir.path().join(format!("part-{i}.parquet"));
            write_parquet_file(&path, &rows(i * 2000, i * 2000 + 2000), 500);
            uris.push(path.display().to_string());
        }
        let names: Vec<&str> = uris.iter().map(String::as_str).collect();
        let one_batch = rows(0, 32).get_array_memory_size();
        let budget = 4 * one_batch;
        let mut stream = ParquetStream::new(fragments(&names), stream_options(None, 2, budget)).unwrap();
        let mut values = Vec::new();
        for batch in stream.by_ref() {
            values.extend(column_a(&[batch.unwrap()]));
        }
        assert_eq!(values, (0..8000).collect::<Vec<_>>());
        // Each of the 2 threads may overshoot by the one batch it was decoding (strings vary a little).
        let peak = stream.peak_bytes_in_flight();
        assert!(peak <= budget + 2 * one_batch + one_batch / 2, "peak {peak} over budget {budget}");

        // Dropped after one batch: its threads stop and are joined (a hang fails by timeout).
        let mut early = ParquetStream::new(fragments(&names), stream_options(None, 2, budget)).unwrap();
        early.next().unwrap().unwrap();
        drop(early);

        let errors = ParquetStream::new(fragments(&["/no/such/file.parquet"]), stream_options(None, 1, 0))
            .unwrap()
            .collect::<Vec<_>>();
        assert!(matches!(errors.as_slice(), [Err(DataError::NotFound { .. })]), "{errors:?}");
    }
}

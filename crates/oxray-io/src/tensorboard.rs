//! TensorBoard event files (`events.out.tfevents.*`) written without TensorFlow, tensorboardX or torch:
//! TFRecord framing (the record's length, a masked CRC-32C of the length, the record, a masked CRC-32C
//! of the record) around `Event` protos. The first event names the file version, as TensorBoard
//! expects; each later one holds a step's scalars as `simple_value`s.

use prost::Message;
use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The version string TensorBoard's readers look for in a file's first event.
const FILE_VERSION: &str = "brain.Event:2";

/// TFRecord's checksum: CRC-32C (Castagnoli), masked so that a CRC of data holding CRCs stays well spread.
const CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = CASTAGNOLI.checksum(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// `tensorflow.Event`, the fields an event file of scalars uses.
#[derive(Clone, PartialEq, prost::Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(oneof = "EventWhat", tags = "3, 5")]
    what: Option<EventWhat>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum EventWhat {
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`: a tag and a scalar. `simple_value` sits in a oneof in the proto, so it is
/// written even when it is 0 (TensorBoard tells a scalar by the field's presence).
#[derive(Clone, PartialEq, prost::Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(oneof = "SummaryKind", tags = "2")]
    kind: Option<SummaryKind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum SummaryKind {
    #[prost(float, tag = "2")]
    SimpleValue(f32),
}

fn wall_time_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// One event file, created private to the user (0600). Records are buffered until `flush` or `close`
/// hands them to the OS. Nothing syncs them to the disk: TensorBoard's files are a view, not state a
/// restore reads, and a sync per trial would cost an experiment of quick trials more than the rest.
pub struct EventFileWriter {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
}

impl EventFileWriter {
    /// Creates the file at `path` (its directory must exist) and writes the file-version event.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
        let mut writer = Self { path: path.to_path_buf(), out: BufWriter::new(file) };
        writer.write_event(&Event {
            wall_time: wall_time_now(),
            step: 0,
            what: Some(EventWhat::FileVersion(FILE_VERSION.to_string())),
        })?;
        writer.flush()?;
        Ok(writer)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event holding `scalars` (tag, value) at `step`.
    pub fn add_scalars(&mut self, step: i64, scalars: Vec<(String, f64)>) -> std::io::Result<()> {
        let value = scalars
            .into_iter()
            .map(|(tag, value)| SummaryValue { tag, kind: Some(SummaryKind::SimpleValue(value as f32)) })
            .collect();
        self.write_event(&Event { wall_time: wall_time_now(), step, what: Some(EventWhat::Summary(Summary { value })) })
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    pub fn close(mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn write_event(&mut self, event: &Event) -> std::io::Result<()> {
        let record = event.encode_to_vec();
        let length = (record.len() as u64).to_le_bytes();
        self.out.write_all(&length)?;
        self.out.write_all(&masked_crc(&length).to_le_bytes())?;
        self.out.write_all(&record)?;
        self.out.write_all(&masked_crc(&record).to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Reads the records back, checking both checksums of each.
    fn read_records(bytes: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let length_bytes = &bytes[at..at + 8];
            let length = u64::from_le_bytes(length_bytes.try_into().unwrap()) as usize;
            let length_crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            assert_eq!(length_crc, masked_crc(length_bytes));
            let record = &bytes[at + 12..at + 12 + length];
            let record_crc = u32::from_le_bytes(bytes[at + 12 + length..at + 16 + length].try_into().unwrap());
            assert_eq!(record_crc, masked_crc(record));
            events.push(Event::decode(record).unwrap());
            at += 16 + length;
        }
        events
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // CRC-32C of "123456789" is 0xE3069283 (RFC 3720's check value).
        assert_eq!(CASTAGNOLI.checksum(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn writes_a_version_event_then_scalars_with_zero_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.out.tfevents.1.host");
        let mut writer = EventFileWriter::create(&path).unwrap();
        writer.add_scalars(1, vec![("ray/tune/loss".into(), 0.5), ("ray/tune/acc".into(), 0.0)]).unwrap();
        writer.add_scalars(2, vec![("ray/tune/loss".into(), 0.25)]).unwrap();
        writer.close().unwrap();

        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let events = read_records(&std::fs::read(&path).unwrap());
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].what, Some(EventWhat::FileVersion(FILE_VERSION.into())));
        let Some(EventWhat::Summary(first)) = &events[1].what else { panic!("not a summary: {:?}", events[1]) };
        assert_eq!(events[1].step, 1);
        assert_eq!(first.value[1].tag, "ray/tune/acc");
        assert_eq!(first.value[1].kind, Some(SummaryKind::SimpleValue(0.0)));
        assert_eq!(events[2].step, 2);
    }

    #[test]
    fn refuses_to_overwrite_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.out.tfevents.1.host");
        std::fs::write(&path, b"x").unwrap();
        assert_eq!(EventFileWriter::create(&path).err().unwrap().kind(), std::io::ErrorKind::AlreadyExists);
    }
}

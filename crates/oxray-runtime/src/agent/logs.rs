//! Worker output: read line by line whatever the bytes (`OutputLines`), and
//! published to drivers that subscribe (`SubscribeLogs`): each driver receives
//! the lines of its own job's tasks and actors.

use crate::ids::JobId;
use oxray_proto::{LogBatch, LogLine};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::broadcast::{self, error::RecvError};
use tonic::Status;

/// The most of one line that is forwarded to drivers; the rest is cut (the
/// worker's log file keeps the whole line).
pub(super) const MAX_FORWARDED_LINE: usize = 64 * 1024;

/// How long a line without its newline waits for the rest: then what came is a line of its own,
/// so `print(x, end=" ")` (a prompt, progress) reaches the driver while the worker carries on.
const PARTIAL_LINE_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// The lines of one worker output stream. Bytes that are not UTF-8 become
/// U+FFFD instead of ending the stream (which would close the pipe and make
/// the worker's next `print` fail), and a line longer than
/// `MAX_FORWARDED_LINE` is cut, so memory stays bounded whatever a task prints.
pub(super) struct OutputLines<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    /// Bytes of the current line past the limit, not kept.
    cut: usize,
}

impl<R: AsyncRead + Unpin> OutputLines<R> {
    pub(super) fn new(stream: R) -> Self {
        OutputLines { reader: BufReader::new(stream), line: Vec::new(), cut: 0 }
    }

    /// The next line without its end of line, None at the end of the stream.
    /// Every byte read is also appended, unchanged, to `log` when given.
    pub(super) async fn next_line(&mut self, mut log: Option<&mut tokio::fs::File>) -> Option<String> {
        loop {
            let partial = !self.line.is_empty() || self.cut > 0;
            if partial && self.reader.buffer().is_empty() {
                // Wait for more only so long (the read keeps what it gets: no byte is lost).
                let more = tokio::time::timeout(PARTIAL_LINE_WAIT, self.reader.fill_buf()).await;
                if more.is_err() {
                    return Some(self.take_line());
                }
            }
            let chunk = match self.reader.fill_buf().await {
                Ok(chunk) => chunk,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => &[],
            };
            if chunk.is_empty() {
                // The end: a last line without a newline is still a line.
                return (!self.line.is_empty() || self.cut > 0).then(|| self.take_line());
            }
            let newline = chunk.iter().position(|&b| b == b'\n');
            let used = newline.map_or(chunk.len(), |i| i + 1);
            if let Some(file) = log.as_deref_mut() {
                // Best effort: a full disk must not stop the output reaching drivers.
                let _ = file.write_all(&chunk[..used]).await;
            }
            let body = &chunk[..newline.unwrap_or(chunk.len())];
            let room = MAX_FORWARDED_LINE.saturating_sub(self.line.len());
            self.line.extend_from_slice(&body[..body.len().min(room)]);
            self.cut += body.len().saturating_sub(room);
            self.reader.consume(used);
            if newline.is_some() {
                return Some(self.take_line());
            }
        }
    }

    fn take_line(&mut self) -> String {
        if self.line.last() == Some(&b'\r') && self.cut == 0 {
            self.line.pop();
        }
        let mut text = String::from_utf8_lossy(&self.line).into_owned();
        if self.cut > 0 {
            text.push_str(&format!(" [... {} more bytes cut; the worker's log file has the whole line]", self.cut));
        }
        self.line.clear();
        self.cut = 0;
        text
    }
}

/// Lines kept for a slow subscriber before it misses some.
const BACKLOG: usize = 8192;
const MAX_BATCH: usize = 512;

struct LogRecord {
    /// `None`: printed by a worker between jobs, which every subscriber sees.
    job_id: Option<JobId>,
    line: LogLine,
}

pub(super) struct LogHub {
    tx: broadcast::Sender<Arc<LogRecord>>,
}

impl Default for LogHub {
    fn default() -> Self {
        LogHub { tx: broadcast::channel(BACKLOG).0 }
    }
}

impl LogHub {
    pub(super) fn publish(&self, job_id: Option<JobId>, prefix: String, text: String, is_stderr: bool) {
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(Arc::new(LogRecord { job_id, line: LogLine { prefix, text, is_stderr } }));
        }
    }

    /// A stream of batches of the lines of `job_id` (every job when `None`;
    /// lines of a worker between jobs go to everyone).
    pub(super) fn subscribe(
        &self,
        job_id: Option<JobId>,
    ) -> tokio_stream::wrappers::ReceiverStream<Result<LogBatch, Status>> {
        let mut rx = self.tx.subscribe();
        let (out, out_rx) = tokio::sync::mpsc::channel(64);
        let wanted = move |r: &LogRecord| job_id.is_none() || r.job_id.is_none() || r.job_id == job_id;
        tokio::spawn(async move {
            loop {
                let mut lines = Vec::new();
                let take = |got: Result<Arc<LogRecord>, RecvError>, lines: &mut Vec<LogLine>| match got {
                    Ok(r) => {
                        if wanted(&r) {
                            lines.push(r.line.clone());
                        }
                        true
                    }
                    Err(RecvError::Lagged(n)) => {
                        lines.push(LogLine {
                            prefix: "oxray".into(),
                            text: format!("{n} lines of worker output were dropped"),
                            is_stderr: true,
                        });
                        true
                    }
                    Err(RecvError::Closed) => false,
                };
                if !take(rx.recv().await, &mut lines) {
                    return;
                }
                while lines.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(r) => take(Ok(r), &mut lines),
                        Err(broadcast::error::TryRecvError::Lagged(n)) => take(Err(RecvError::Lagged(n)), &mut lines),
                        Err(_) => break,
                    };
                }
                if !lines.is_empty() && out.send(Ok(LogBatch { lines })).await.is_err() {
                    return;
                }
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(out_rx)
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_FORWARDED_LINE, OutputLines};

    async fn all_lines(bytes: &[u8]) -> Vec<String> {
        let mut lines = OutputLines::new(bytes);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line(None).await {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn invalid_utf8_is_replaced_and_the_stream_goes_on() {
        let lines = all_lines(b"ok\nbad \xff\xfe end\r\nafter\nlast").await;
        assert_eq!(lines, ["ok", "bad \u{fffd}\u{fffd} end", "after", "last"]);
    }

    #[tokio::test]
    async fn a_huge_line_is_cut_and_the_next_line_is_whole() {
        let mut bytes = vec![b'y'; 3 * MAX_FORWARDED_LINE + 10];
        bytes.extend_from_slice(b"\nnext\n");
        let lines = all_lines(&bytes).await;
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with(&"y".repeat(MAX_FORWARDED_LINE)));
        assert!(
            lines[0].contains(&format!("{} more bytes cut", 2 * MAX_FORWARDED_LINE + 10)),
            "{}",
            &lines[0][MAX_FORWARDED_LINE..]
        );
        assert_eq!(lines[1], "next");
    }

    #[tokio::test]
    async fn a_line_left_without_its_newline_comes_out_while_the_stream_stays_open() {
        use tokio::io::AsyncWriteExt;
        let (mut worker, pipe) = tokio::io::duplex(1024);
        let mut lines = OutputLines::new(pipe);
        // `print(i, end=" ")` in a task: no newline comes, and the worker is still there.
        worker.write_all(b"0 1 2 ").await.unwrap();
        let partial = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line(None)).await;
        assert_eq!(partial.expect("the partial line never came out").as_deref(), Some("0 1 2 "));
        worker.write_all(b"3\nwhole\n").await.unwrap();
        assert_eq!(lines.next_line(None).await.as_deref(), Some("3"));
        assert_eq!(lines.next_line(None).await.as_deref(), Some("whole"));
        drop(worker);
        assert_eq!(lines.next_line(None).await, None);
    }
}

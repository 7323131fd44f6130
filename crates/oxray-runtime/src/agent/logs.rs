//! Worker output published to drivers that subscribe (`SubscribeLogs`): each
//! driver receives the lines of its own job's tasks and actors.

use crate::ids::JobId;
use oxray_proto::{LogBatch, LogLine};
use std::sync::Arc;
use tokio::sync::broadcast::{self, error::RecvError};
use tonic::Status;

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

//! A job run on another node whose event stream breaks: the head re-attaches from the log's
//! offset while the node is alive, and fails the job only once the node is declared dead.
//! The node is a scripted `RemoteJobs`; the manager, its store and log are the real ones.

use oxray_jobs::record::{JobStatus, parse_submit};
use oxray_jobs::{
    BoxFuture, EntrypointResources, HeldOn, HoldError, JobManager, JobsConfig, RemoteError, RemoteEvent, RemoteJobs,
    RemoteRun,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// Places every job on node `ab`.
#[derive(Debug)]
struct OnNodeAb;

impl EntrypointResources for OnNodeAb {
    fn hold<'a>(&'a self, _: &'a str, _: &'a BTreeMap<String, f64>) -> BoxFuture<'a, Result<HeldOn, HoldError>> {
        Box::pin(async { Ok(HeldOn::Node { node: "ab".into(), group: "01".into() }) })
    }
    fn adopt<'a>(&'a self, _: &'a str, _: &'a BTreeMap<String, f64>, _: &'a str, _: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
    fn release<'a>(&'a self, _: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// A node that answers each run (or re-attach) with its next script of events, then ends the stream.
#[derive(Debug, Default)]
struct ScriptedNode {
    scripts: Mutex<VecDeque<Vec<RemoteEvent>>>,
    runs: Mutex<Vec<Option<u64>>>,
    run_ids: Mutex<Vec<String>>,
    alive: AtomicBool,
}

impl RemoteJobs for ScriptedNode {
    fn run<'a>(
        &'a self,
        _: &'a str,
        run: RemoteRun,
    ) -> BoxFuture<'a, Result<mpsc::Receiver<RemoteEvent>, RemoteError>> {
        Box::pin(async move {
            self.runs.lock().push(run.attach_from);
            self.run_ids.lock().push(run.run_id.clone());
            let refused = |message: String| RemoteError::Call { message };
            let script = self.scripts.lock().pop_front().ok_or_else(|| refused("the node knows no such job".into()))?;
            let (tx, rx) = mpsc::channel(16);
            for event in script {
                tx.send(event).await.map_err(|e| refused(e.to_string()))?;
            }
            Ok(rx) // `tx` dropped: the stream ends after the script
        })
    }
    fn stop<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<bool, RemoteError>> {
        Box::pin(async { Ok(true) })
    }
    fn node_alive<'a>(&'a self, _: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async { self.alive.load(Ordering::SeqCst) })
    }
}

fn manager(dir: &std::path::Path, node: Arc<ScriptedNode>) -> Arc<JobManager> {
    JobManager::open(JobsConfig {
        head_address: "127.0.0.1:1".into(),
        token: "t".into(),
        data_dir: dir.join("data"),
        session_dir: dir.join("session"),
        python: "python3".into(),
        resources: Some(Arc::new(OnNodeAb)),
        drivers: None,
        remote: Some(node),
    })
    .unwrap()
}

/// Waits (on the record, as a client polls it) for the job to end; its final record.
async fn ended(jobs: &JobManager, id: &str) -> oxray_jobs::record::JobRecord {
    let wait = async {
        loop {
            let record = jobs.get(id).unwrap();
            if record.status.is_terminal() {
                return record;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), wait).await.expect("the job never ended")
}

fn submit(jobs: &Arc<JobManager>) -> String {
    jobs.submit(parse_submit(br#"{"entrypoint": "python job.py", "entrypoint_num_cpus": 1}"#).unwrap()).unwrap()
}

#[tokio::test]
async fn a_broken_stream_is_reattached_from_the_logs_offset_while_the_node_lives() {
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(ScriptedNode::default());
    node.alive.store(true, Ordering::SeqCst);
    node.scripts.lock().extend([
        vec![RemoteEvent::Started { pid: 7 }, RemoteEvent::Output(b"before the break\n".to_vec())],
        vec![RemoteEvent::Output(b"after it\n".to_vec()), RemoteEvent::Exited(Some(0))],
    ]);
    let jobs = manager(dir.path(), node.clone());
    let id = submit(&jobs);
    let record = ended(&jobs, &id).await;
    assert_eq!(record.status, JobStatus::Succeeded, "{}", record.message);
    assert_eq!(*node.runs.lock(), [None, Some(17)], "re-attached from the 17 bytes the log holds");
    let run_ids = node.run_ids.lock().clone();
    assert_eq!(run_ids[0].len(), 32, "a run id of its own, not the submission id: {run_ids:?}");
    assert_eq!(run_ids[0], run_ids[1], "the re-attach names the same run");
    assert_eq!(record.run_id.as_deref(), Some(run_ids[0].as_str()), "and the record keeps it");
    let log = std::fs::read_to_string(jobs.job_log_path(&id).unwrap()).unwrap();
    assert_eq!(log, "before the break\nafter it\n");
}

#[tokio::test]
async fn the_job_fails_only_once_its_node_is_declared_dead() {
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(ScriptedNode::default());
    node.scripts.lock().push_back(vec![RemoteEvent::Started { pid: 7 }]);
    let jobs = manager(dir.path(), node.clone());
    let id = submit(&jobs);
    let record = ended(&jobs, &id).await;
    assert_eq!(record.status, JobStatus::Failed);
    assert!(record.message.contains("died before the job ended"), "{}", record.message);
    assert_eq!(*node.runs.lock(), [None], "a dead node is not asked again");
}

//! Jobs the head placed on this node (`NodeJobService`): the entrypoint runs
//! here, in a runtime_env prepared here (`oxray_jobs::runtime_env`), under the
//! same wrapper shell as on the head (`oxray_jobs::entrypoint`), its output in
//! a log file under `<session>/jobs/`. The output and the exit stream back to
//! the head, which keeps the job's record and log; a restarted head re-attaches
//! from the offset its log has reached. Runs are keyed by the run id the head
//! gives each start, never by the submission id, which a user may reuse.

use super::service::AgentService;
use oxray_jobs::entrypoint::{Entrypoint, STOP_GRACE, child_exit_code, signal_group, stop_group};
use oxray_jobs::runtime_env::Preparer;
use oxray_proto::node_job_service_server::NodeJobService;
use oxray_proto::{JobEvent, RunJobRequest, StopJobReply, StopJobRequest, job_event};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// How many ended jobs an agent remembers (for a head re-attaching late).
const ENDED_KEPT: usize = 100;
/// Output sent per event at most.
const CHUNK: u64 = 1 << 20;
/// How often a running job's log is read for new output.
const LOG_POLL: Duration = Duration::from_millis(100);

/// The jobs this agent runs or ran, by run id.
#[derive(Default)]
pub(crate) struct NodeJobs {
    jobs: Mutex<HashMap<String, Arc<NodeJob>>>,
    /// Runs that ended, oldest first: forgotten past `ENDED_KEPT`.
    ended: Mutex<VecDeque<String>>,
}

struct NodeJob {
    log: PathBuf,
    /// Its runtime_env setup's stop and deadline (a stop before the entrypoint starts kills the setup).
    setup: oxray_jobs::runtime_env::SetupControl,
    /// The entrypoint's process group, once started.
    pid: Mutex<Option<u32>>,
    /// None while it runs; then how it ended (an exit code, or None if unknown).
    exit: watch::Sender<Option<Option<i32>>>,
}

fn job_error(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl NodeJobs {
    /// Stops every job still running here (the node is shutting down): SIGTERM,
    /// then SIGKILL for those still there after the grace time.
    pub(crate) async fn stop_all(&self) {
        let running: Vec<Arc<NodeJob>> =
            self.jobs.lock().values().filter(|j| j.exit.borrow().is_none()).cloned().collect();
        for job in &running {
            match *job.pid.lock() {
                Some(pid) => {
                    signal_group(pid, libc::SIGTERM);
                }
                None => job.setup.stop_flag().store(true, std::sync::atomic::Ordering::SeqCst),
            }
        }
        if tokio::time::timeout(STOP_GRACE, all_ended(&running)).await.is_err() {
            for job in &running {
                if let Some(pid) = *job.pid.lock() {
                    signal_group(pid, libc::SIGKILL);
                }
            }
        }
    }

    fn remember_ended(&self, run_id: &str) {
        let mut ended = self.ended.lock();
        ended.push_back(run_id.to_string());
        while ended.len() > ENDED_KEPT {
            let Some(old) = ended.pop_front() else { break };
            self.jobs.lock().remove(&old);
        }
    }
}

/// Resolves once every job in `jobs` has ended.
async fn all_ended(jobs: &[Arc<NodeJob>]) {
    for job in jobs {
        let mut exit = job.exit.subscribe();
        let _ = exit.wait_for(Option::is_some).await;
    }
}

type Events = mpsc::Sender<Result<JobEvent, Status>>;

async fn send(events: &Events, event: job_event::Event) -> bool {
    events.send(Ok(JobEvent { event: Some(event) })).await.is_ok()
}

/// Streams `job`'s output from `offset`, then its end.
async fn stream_job(job: Arc<NodeJob>, mut offset: u64, events: Events) {
    let mut exit = job.exit.subscribe();
    loop {
        let ended = *exit.borrow_and_update();
        // Read after looking at the exit: once it has ended, this read gets everything.
        loop {
            let chunk = oxray_jobs::logs::read_from(&job.log, offset, CHUNK);
            if chunk.is_empty() {
                break;
            }
            offset += chunk.len() as u64;
            if !send(&events, job_event::Event::Output(chunk)).await {
                return;
            }
        }
        if let Some(code) = ended {
            let event = match code {
                Some(code) => job_event::Event::ExitCode(code),
                None => job_event::Event::ExitedUnknown(true),
            };
            let _ = send(&events, event).await;
            return;
        }
        tokio::select! {
            _ = exit.changed() => {}
            _ = tokio::time::sleep(LOG_POLL) => {}
        }
    }
}

impl AgentService {
    /// Prepares and starts a job here; its events go to `events`.
    async fn start_job(&self, mut req: RunJobRequest, events: Events) -> Result<(), Status> {
        let spawn = self
            .shared
            .spawn
            .lock()
            .clone()
            .ok_or_else(|| Status::unavailable("this node is still starting: it cannot run jobs yet"))?;
        let (id, run_id) = (req.submission_id.clone(), req.run_id.clone());
        // The head checked both; checked again, as they name files here.
        for (what, value) in [("submission id", &id), ("run id", &run_id)] {
            if !oxray_jobs::record::is_valid_submission_id(value) {
                return Err(Status::invalid_argument(format!(
                    "job {what} {value:?} is not valid: expected 1 to 255 letters, digits, '-', '_' or '.'"
                )));
            }
        }
        let parse = |json: &str, what: &str| -> Result<serde_json::Map<String, serde_json::Value>, Status> {
            match serde_json::from_str(json) {
                Ok(serde_json::Value::Object(map)) => Ok(map),
                Ok(serde_json::Value::Null) | Err(_) if json.is_empty() => Ok(Default::default()),
                _ => Err(Status::invalid_argument(format!("the job's {what} is not a JSON object"))),
            }
        };
        let runtime_env = parse(&req.runtime_env_json, "runtime_env")?;
        let metadata = parse(&req.metadata_json, "metadata")?;
        let jobs_dir = spawn.session_dir.join("jobs");
        let (packages_dir, logs_dir) = (jobs_dir.join("packages"), jobs_dir.join("job_logs"));
        for dir in [&packages_dir, &logs_dir] {
            oxray_object_store::create_private_dir_all(dir)
                .map_err(|e| Status::internal(job_error(&format!("cannot create {}", dir.display()), e)))?;
        }
        let log_path = logs_dir.join(format!("job-driver-{id}-{run_id}.log"));
        let job = Arc::new(NodeJob {
            log: log_path.clone(),
            setup: oxray_jobs::runtime_env::SetupControl::for_runtime_env(&runtime_env),
            pid: Mutex::new(None),
            exit: watch::Sender::new(None),
        });
        {
            let mut jobs = self.shared.jobs.jobs.lock();
            if jobs.contains_key(&run_id) {
                return Err(Status::already_exists(format!(
                    "run {run_id} of job {id} was started on this node already"
                )));
            }
            jobs.insert(run_id.clone(), job.clone());
        }
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let ended = |code: Option<i32>| {
                job.exit.send_replace(Some(code));
                shared.jobs.remember_ended(&run_id);
            };
            let packages = std::mem::take(&mut req.packages);
            let prepared = tokio::task::spawn_blocking({
                let (packages_dir, log_path, spawn) = (packages_dir.clone(), log_path.clone(), spawn.clone());
                let runtime_env = runtime_env.clone();
                let control = job.setup.clone();
                move || -> Result<_, String> {
                    for package in &packages {
                        let name = package.uri.strip_prefix("gcs://").unwrap_or(&package.uri);
                        let key = oxray_jobs::runtime_env::package_file_name(name).map_err(|e| e.to_string())?;
                        oxray_object_store::write_private_file(&packages_dir.join(key), &package.data)
                            .map_err(|e| job_error(&format!("cannot store package {}", package.uri), e))?;
                    }
                    let log = oxray_object_store::private_file_options()
                        .create(true)
                        .write(true)
                        .truncate(true)
                        .open(&log_path)
                        .map_err(|e| job_error("cannot create the job's log", e))?;
                    let prepared = Preparer {
                        packages_dir: &packages_dir,
                        session_dir: &spawn.session_dir,
                        data_dir: &spawn.session_dir.join("jobs"),
                        python: &spawn.python,
                        log: &log,
                        control: &control,
                    }
                    .prepare(&runtime_env)
                    .map_err(|e| e.to_string())?;
                    Ok((prepared, log))
                }
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            let (prepared, log) = match prepared {
                Ok(_) if job.setup.stopped() => {
                    let _ = send(&events, job_event::Event::SetupFailed("the job was stopped".into())).await;
                    return ended(None);
                }
                Ok(ready) => ready,
                Err(e) => {
                    let _ = send(&events, job_event::Event::SetupFailed(e)).await;
                    return ended(None);
                }
            };
            let entrypoint = Entrypoint {
                submission_id: &id,
                command: &req.entrypoint,
                runtime_env: &runtime_env,
                metadata: &metadata,
                head_address: &req.head_address,
                token: &spawn.token,
                python: &spawn.python,
                store: &jobs_dir,
            };
            let exit_file = logs_dir.join(format!(".job-exit-{run_id}"));
            let mut child = match entrypoint.spawn(&prepared, log, &exit_file) {
                Ok(child) => child,
                Err(e) => {
                    let _ = send(&events, job_event::Event::StartFailed(e.to_string())).await;
                    return ended(None);
                }
            };
            let pid = child.id().unwrap_or(0);
            *job.pid.lock() = Some(pid);
            let _ = send(&events, job_event::Event::StartedPid(pid)).await;
            let streaming = tokio::spawn(stream_job(job.clone(), 0, events));
            let code = child.wait().await.ok().map(child_exit_code);
            *job.pid.lock() = None;
            ended(code);
            let _ = streaming.await;
        });
        Ok(())
    }
}

#[tonic::async_trait]
impl NodeJobService for AgentService {
    type RunJobStream = ReceiverStream<Result<JobEvent, Status>>;

    async fn run_job(&self, request: Request<RunJobRequest>) -> Result<Response<Self::RunJobStream>, Status> {
        let req = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        if req.attach {
            let job = self.shared.jobs.jobs.lock().get(&req.run_id).cloned().ok_or_else(|| {
                Status::not_found(format!(
                    "run {} of job {} is not (any more) known on this node",
                    req.run_id, req.submission_id
                ))
            })?;
            let started = *job.pid.lock();
            if let Some(pid) = started {
                let _ = send(&tx, job_event::Event::StartedPid(pid)).await;
            }
            tokio::spawn(stream_job(job, req.offset, tx));
        } else {
            self.start_job(req, tx).await?;
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn stop_job(&self, request: Request<StopJobRequest>) -> Result<Response<StopJobReply>, Status> {
        let run_id = request.into_inner().run_id;
        let Some(job) = self.shared.jobs.jobs.lock().get(&run_id).cloned() else {
            return Ok(Response::new(StopJobReply { stopped: false }));
        };
        let Some(pid) = *job.pid.lock() else {
            // Still setting up: its setup's commands are killed, and it never starts.
            let setting_up = job.exit.borrow().is_none();
            if setting_up {
                job.setup.stop_flag().store(true, std::sync::atomic::Ordering::SeqCst);
            }
            return Ok(Response::new(StopJobReply { stopped: setting_up }));
        };
        let mut exit = job.exit.subscribe();
        stop_group(pid, Some(async move { exit.wait_for(Option::is_some).await.map(drop) }));
        Ok(Response::new(StopJobReply { stopped: true }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Arc<NodeJob> {
        Arc::new(NodeJob {
            log: PathBuf::from("/nonexistent"),
            setup: oxray_jobs::runtime_env::SetupControl::new(None),
            pid: Mutex::new(None),
            exit: watch::Sender::new(None),
        })
    }

    #[test]
    fn ended_runs_are_forgotten_oldest_first_and_a_running_one_never() {
        let table = NodeJobs::default();
        // A job runs here; its submission id is reused for a later run, which has a run id of its own.
        let running = run();
        table.jobs.lock().insert("run-a".into(), running.clone());
        for i in 0..=ENDED_KEPT {
            let other = run();
            table.jobs.lock().insert(format!("ended-{i}"), other.clone());
            other.exit.send_replace(Some(Some(0)));
            table.remember_ended(&format!("ended-{i}"));
        }
        let kept = table.jobs.lock().get("run-a").cloned().expect("the running run is still in the table");
        assert!(Arc::ptr_eq(&kept, &running));
        assert!(!table.jobs.lock().contains_key("ended-0"), "the oldest ended run is forgotten");
        assert!(table.jobs.lock().contains_key(&format!("ended-{ENDED_KEPT}")));
    }
}

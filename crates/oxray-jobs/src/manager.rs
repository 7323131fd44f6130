//! The job manager: submitted entrypoints run and supervised by the head, their
//! records in redb (`store.rs`), their output in one log file each, their
//! `working_dir` packages unpacked from uploads (`packages.rs`); `oxray-http`
//! serves it over Ray's Jobs routes.
//!
//! An entrypoint runs through `/bin/sh -c` in its own process group, in its
//! working_dir, with `RAY_ADDRESS`/`OXRAY_ADDRESS` (and the token) set so a bare
//! `init()` joins this cluster. Stop sends SIGTERM to the group and SIGKILL
//! after [`STOP_GRACE`].

use crate::entrypoint::{JOB_ID_VAR, JOB_STORE_VAR, STOP_GRACE, wait_for_exit};
use crate::packages::PackageError;
use crate::record::{
    JobRecord, JobStatus, MSG_PENDING, MSG_RUNNING, MSG_STOPPED, MSG_SUCCEEDED, SubmitError, SubmitRequest,
};
use crate::resources::{EntrypointResources, HeldOn, HoldError};
use crate::runtime_env::RuntimeEnvError;
use crate::store::{JobStore, StoreError};
use crate::{drivers, entrypoint, packages, record, remote, runtime_env};
use oxray_object_store::process_start_ticks;
use oxray_rest::JobDetails;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::Instrument;

/// Lines of output quoted in a failed job's message.
const FAILURE_TAIL_LINES: usize = 10;
/// How long a head waits before re-attaching to a remote job whose stream broke, doubling up to
/// `REATTACH_MAX_WAIT` while the node stays alive and unreachable.
const REATTACH_FIRST_WAIT: Duration = Duration::from_millis(200);
const REATTACH_MAX_WAIT: Duration = Duration::from_secs(2);

/// Where the jobs of a head live and how they reach the cluster.
#[derive(Clone, Debug)]
pub struct JobsConfig {
    /// The head's gRPC address (what a job's `init()` joins).
    pub head_address: String,
    /// The cluster token, given to the job's processes.
    pub token: String,
    /// Records, uploaded packages and logs: the head's state directory (kept
    /// across restarts), else its session directory.
    pub data_dir: PathBuf,
    /// Where working_dir packages are unpacked.
    pub session_dir: PathBuf,
    /// The cluster's Python interpreter: its directory goes first on the job's PATH.
    pub python: String,
    /// The scheduler that holds `entrypoint_*` resources; without one, a job
    /// asking for any is refused.
    pub resources: Option<Arc<dyn EntrypointResources>>,
    /// The cluster's drivers, for the `job_id`/`driver_info` of submissions and
    /// for DRIVER rows; without it, only submissions are listed.
    pub drivers: Option<Arc<dyn drivers::DriverTable>>,
    /// Runs jobs placed on other nodes through their agents; without it, a
    /// job placed elsewhere fails saying so.
    pub remote: Option<Arc<dyn remote::RemoteJobs>>,
}

/// How long a job may wait PENDING for its resources before it fails
/// (`RAY_JOB_START_TIMEOUT_SECONDS`, 15 minutes by default, as in Ray).
fn start_timeout() -> Duration {
    const DEFAULT: f64 = 900.0;
    let seconds = match std::env::var("RAY_JOB_START_TIMEOUT_SECONDS") {
        Ok(raw) => raw.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0).unwrap_or_else(|| {
            tracing::warn!("RAY_JOB_START_TIMEOUT_SECONDS={raw:?} is not a number of seconds; using {DEFAULT}");
            DEFAULT
        }),
        Err(_) => DEFAULT,
    };
    Duration::from_secs_f64(seconds)
}

/// A running job's live parts.
struct Live {
    /// Set to true to stop the job (whether it waits or runs).
    stop: Arc<watch::Sender<bool>>,
    /// Bytes of output written so far; closed when the job has ended.
    log: watch::Receiver<u64>,
}

pub struct JobManager {
    config: JobsConfig,
    store: JobStore,
    live: parking_lot::Mutex<HashMap<String, Live>>,
    /// Notified whenever a live job's final record is written.
    ended: tokio::sync::Notify,
    /// Set by [`JobManager::stop_all`]: jobs stopped now say the head shut down.
    shutting_down: std::sync::atomic::AtomicBool,
}

/// Why a job request failed. `oxray-http`'s `error.rs` gives each variant the status Ray answers:
/// the request's own faults a 400, an unknown job a 404, the rest a 500.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The submit body was refused.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// An upload's name or archive was refused.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// The id names a driver started by hand, not a submission.
    #[error(
        "Job {id} is a DRIVER job (a driver started by hand, not submitted through the Jobs API): it has no logs, \
         stop or delete here"
    )]
    DriverJob { id: String },
    /// The job asks for entrypoint resources and nothing here can hold them.
    #[error("entrypoint resources {resources:?} cannot be reserved: this server has no scheduler to hold them")]
    NoScheduler { resources: BTreeMap<String, f64> },
    /// No such job.
    #[error("Job {id} does not exist")]
    NotFound { id: String },
    /// A job with the submitted id is kept already (Ray's head answers it as a 500).
    #[error(
        "Request failed with status code 400: Job with submission_id {id} already exists. Please use a different \
         submission_id."
    )]
    AlreadyExists { id: String },
    /// Only a finished job can be deleted (Ray's head answers it as a 500).
    #[error("Attempted to delete job with id '{id}', but it is in a non-terminal state {}.", .status.as_str())]
    NotTerminal { id: String, status: JobStatus },
    /// The job store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A directory the jobs are kept in could not be made.
    #[error("cannot create {}: {source}", .path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    /// An upload that checked out could not be written.
    #[error("cannot store the package: {0}")]
    StorePackage(#[source] std::io::Error),
}

impl JobManager {
    /// Opens the job store and takes over what a previous head left unfinished:
    /// a job whose process still runs is adopted (followed to its end), one
    /// that ended meanwhile gets its exit code, one that never started starts
    /// now, and one whose process is gone without a trace is marked FAILED
    /// (its stray processes killed, so nothing runs unsupervised).
    #[tracing::instrument(skip_all, fields(data_dir = %config.data_dir.display()))]
    pub fn open(config: JobsConfig) -> Result<Arc<Self>, JobError> {
        let store = JobStore::open(&config.data_dir)?;
        for dir in [config.data_dir.join("job_logs"), config.data_dir.join("packages")] {
            oxray_object_store::create_private_dir_all(&dir)
                .map_err(|source| JobError::CreateDir { path: dir.clone(), source })?;
        }
        let manager = Arc::new(Self {
            config,
            store,
            live: parking_lot::Mutex::new(HashMap::new()),
            ended: tokio::sync::Notify::new(),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
        });
        for mut record in manager.store.all()? {
            if record.status.is_terminal() {
                continue;
            }
            let alive =
                record.pid.zip(record.pid_start).filter(|(pid, start)| process_start_ticks(*pid) == Some(*start));
            if let Some(node) = record.node.clone() {
                manager.adopt_remote(record, node);
            } else if record.status == JobStatus::Pending {
                manager.start(record);
            } else if let Some((pid, start)) = alive {
                manager.adopt(record, pid, start);
            } else if let Some(code) = manager.read_exit_code(&record.submission_id) {
                manager.record_exit(&mut record, Some(code), false);
                manager.store.put(&record)?;
            } else {
                // Also what left its group: every process carrying the job's id in its environment.
                for pid in processes_of_job(&manager.config.data_dir, &record.submission_id) {
                    // SAFETY: kill only sends a signal.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                }
                record.end(
                    JobStatus::Failed,
                    "The head stopped while this job was running and its process is gone without an exit code: \
                     it is marked failed and any processes it left were killed (submit it again)."
                        .into(),
                    Some("JOB_SUPERVISOR_ACTOR_DIED"),
                );
                manager.store.put(&record)?;
            }
        }
        Ok(manager)
    }

    /// Where a job's wrapper shell writes the entrypoint's exit code, for a head
    /// that is not its parent (one restarted meanwhile).
    fn exit_path(&self, id: &str) -> PathBuf {
        self.config.data_dir.join("job_logs").join(format!(".job-exit-{id}"))
    }

    fn read_exit_code(&self, id: &str) -> Option<i32> {
        entrypoint::read_exit_code(&self.exit_path(id))
    }

    fn packages_dir(&self) -> PathBuf {
        self.config.data_dir.join("packages")
    }

    pub fn log_path(&self, id: &str) -> PathBuf {
        self.config.data_dir.join("job_logs").join(format!("job-driver-{id}.log"))
    }

    fn drivers(&self) -> Vec<drivers::DriverRow> {
        self.config.drivers.as_ref().map(|table| table.drivers()).unwrap_or_default()
    }

    /// A submission's record, by its submission id or its driver's JobID; a
    /// driver started by hand is a 400 (it has no logs, stop or delete here).
    pub fn get(&self, id: &str) -> Result<JobRecord, JobError> {
        if let Some(record) = self.store.get(id)? {
            return Ok(record);
        }
        match self.drivers().into_iter().find(|d| d.job_id == id) {
            Some(drivers::DriverRow { submission_id: Some(submission), .. }) => self.get(&submission),
            Some(_) => Err(JobError::DriverJob { id: id.to_string() }),
            None => Err(JobError::NotFound { id: id.to_string() }),
        }
    }

    /// Ray's `JobDetails` of a submission or of a driver started by hand.
    pub fn details(&self, id: &str, redact: bool) -> Result<JobDetails, JobError> {
        let drivers = self.drivers();
        if let Some(driver) = drivers.iter().find(|d| d.job_id == id && d.submission_id.is_none())
            && self.store.get(id)?.is_none()
        {
            return Ok(driver.details());
        }
        let record = self.get(id)?;
        Ok(linked(&record, &drivers, redact))
    }

    /// Every submission (with its driver's ids), then every driver started by hand.
    pub fn list(&self, redact: bool) -> Result<Vec<JobDetails>, JobError> {
        let drivers = self.drivers();
        let mut all: Vec<JobDetails> =
            self.store.all()?.iter().map(|record| linked(record, &drivers, redact)).collect();
        all.extend(drivers.iter().filter(|d| d.submission_id.is_none()).map(drivers::DriverRow::details));
        Ok(all)
    }

    fn put(&self, record: &JobRecord) {
        if let Err(e) = self.store.put(record) {
            tracing::error!("cannot record job {}: {e}", record.submission_id);
        }
    }

    /// Records the job as PENDING and starts it; its submission id.
    #[tracing::instrument(skip_all, fields(entrypoint = %request.entrypoint))]
    pub fn submit(self: &Arc<Self>, request: SubmitRequest) -> Result<String, JobError> {
        let id = request.submission_id.clone().unwrap_or_else(record::new_submission_id);
        if !request.resources.is_empty() && self.config.resources.is_none() {
            return Err(JobError::NoScheduler { resources: request.resources });
        }
        let record = JobRecord {
            submission_id: id.clone(),
            entrypoint: request.entrypoint,
            status: JobStatus::Pending,
            message: MSG_PENDING.into(),
            error_type: None,
            start_time: oxray_rest::now_ms(),
            end_time: None,
            metadata: request.metadata,
            runtime_env: request.runtime_env,
            driver_exit_code: None,
            resources: request.resources,
            node: None,
            group: None,
            run_id: None,
            pid: None,
            pid_start: None,
        };
        if !self.store.insert_new(&record)? {
            // Ray's agent refuses it with 400 and its head passes that on as a 500.
            return Err(JobError::AlreadyExists { id });
        }
        // A deleted job's log stays (as in Ray); a new job under its id starts a log of its own.
        for stale in [self.log_path(&id), self.exit_path(&id)] {
            if let Err(e) = std::fs::remove_file(&stale)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!("cannot remove {} before job {id} starts: {e}", stale.display());
            }
        }
        self.start(record);
        Ok(id)
    }

    /// Registers a job as live: its stop flag and its log's watch.
    fn go_live(&self, id: &str) -> (watch::Receiver<bool>, watch::Sender<u64>) {
        let (log_tx, log_rx) = watch::channel(0u64);
        let stop = Arc::new(watch::Sender::new(false));
        let stopped = stop.subscribe();
        self.live.lock().insert(id.to_string(), Live { stop, log: log_rx });
        (stopped, log_tx)
    }

    /// Runs a PENDING job's whole life in a task of its own.
    fn start(self: &Arc<Self>, mut record: JobRecord) {
        let (stop, log_tx) = self.go_live(&record.submission_id);
        let manager = self.clone();
        let span = job_span(&record);
        tokio::spawn(
            async move {
                manager.supervise(&mut record, stop, log_tx).await;
                manager.finish(record).await;
            }
            .instrument(span),
        );
    }

    /// Follows a RUNNING job a previous head started, whose process is still
    /// there, to its end (holding its entrypoint resources again meanwhile).
    fn adopt(self: &Arc<Self>, mut record: JobRecord, pid: u32, start: u64) {
        tracing::info!("adopting job {} (pid {pid}), still running after the head restarted", record.submission_id);
        let (stop, log_tx) = self.go_live(&record.submission_id);
        let manager = self.clone();
        let span = job_span(&record);
        tokio::spawn(
            async move {
                let (id, resources) = (record.submission_id.clone(), record.resources.clone());
                let hold = async {
                    if let Some(scheduler) = manager.config.resources.as_ref().filter(|_| !resources.is_empty())
                        && let Err(e) = scheduler.hold(&id, &resources).await
                    {
                        tracing::warn!("adopted job {id}: its entrypoint resources: {e:?}");
                    }
                    std::future::pending::<()>().await
                };
                tokio::select! {
                    _ = manager.follow(&mut record, Process::Adopted { pid, start }, &stop, log_tx) => {}
                    _ = hold => {}
                }
                manager.finish(record).await;
            }
            .instrument(span),
        );
    }

    /// Follows a job a previous head placed on another node: its agent still
    /// runs it (or knows how it ended); its output continues from what the
    /// head's log already has.
    fn adopt_remote(self: &Arc<Self>, mut record: JobRecord, node: String) {
        tracing::info!("re-attaching to job {} on node {node} after the head restarted", record.submission_id);
        let (stop, log_tx) = self.go_live(&record.submission_id);
        let manager = self.clone();
        let span = job_span(&record);
        tokio::spawn(
            async move {
                // The node's agent still holds the job's resources for the dead head's group: take it over.
                if let (Some(scheduler), Some(group)) = (&manager.config.resources, &record.group) {
                    scheduler.adopt(&record.submission_id, &record.resources, &node, group).await;
                }
                let offset = std::fs::metadata(manager.log_path(&record.submission_id)).map(|m| m.len()).unwrap_or(0);
                manager.run_remote(&mut record, node, &stop, log_tx, Some(offset)).await;
                manager.finish(record).await;
            }
            .instrument(span),
        );
    }

    /// The uploaded packages a runtime_env names (`gcs://` working_dir and
    /// py_modules), for a node that runs the job.
    fn packages_for(
        &self,
        env: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Vec<(String, Vec<u8>)>, RuntimeEnvError> {
        let modules = env.get("py_modules").and_then(|m| m.as_array()).into_iter().flatten();
        let uris = env.get("working_dir").into_iter().chain(modules).filter_map(|v| v.as_str());
        let mut packages = Vec::new();
        for uri in uris.filter(|uri| uri.starts_with("gcs://")) {
            let path = packages::package_path(&self.packages_dir(), uri)?;
            let data = std::fs::read(&path)
                .map_err(|source| RuntimeEnvError::PackageUnreadable { uri: uri.to_string(), source })?;
            packages.push((uri.to_string(), data));
        }
        Ok(packages)
    }

    /// Runs (or, with `attach_from`, re-attaches to) a job on another node's
    /// agent: its output is appended to the head's log as it comes, and its
    /// record follows the node's events.
    async fn run_remote(
        &self,
        record: &mut JobRecord,
        node: String,
        stop: &watch::Receiver<bool>,
        log_tx: watch::Sender<u64>,
        attach_from: Option<u64>,
    ) {
        let Some(remote) = self.config.remote.clone() else {
            let message = format!("The job was placed on node {node}, but this head cannot run jobs on other nodes");
            return record.end(JobStatus::Failed, message, Some("JOB_SUPERVISOR_ACTOR_START_FAILURE"));
        };
        let packages = match attach_from {
            Some(_) => Vec::new(),
            None => match self.packages_for(&record.runtime_env) {
                Ok(packages) => packages,
                Err(e) => {
                    let message = format!("runtime_env setup failed: {e}");
                    return record.end(JobStatus::Failed, message, Some("RUNTIME_ENV_SETUP_FAILURE"));
                }
            },
        };
        if attach_from.is_none() {
            record.run_id = Some(remote::new_run_id());
        }
        let run_id = remote_run_id(record);
        let run = remote::RemoteRun {
            submission_id: record.submission_id.clone(),
            run_id: run_id.clone(),
            entrypoint: record.entrypoint.clone(),
            runtime_env_json: serde_json::Value::Object(record.runtime_env.clone()).to_string(),
            metadata_json: serde_json::Value::Object(record.metadata.clone()).to_string(),
            packages,
            attach_from,
        };
        // Recorded before it starts there: a restarted head re-attaches instead of starting it twice.
        record.node = Some(node.clone());
        self.put(record);
        let mut events = match remote.run(&node, run.clone()).await {
            Ok(events) => events,
            Err(e) => {
                let message = format!("The job could not be run on node {node}: {e}");
                return record.end(JobStatus::Failed, message, Some("JOB_SUPERVISOR_ACTOR_DIED"));
            }
        };
        let log_path = self.log_path(&record.submission_id);
        let mut log = match oxray_object_store::private_file_options().create(true).append(true).open(&log_path) {
            Ok(log) => log,
            Err(e) => {
                let message = format!("runtime_env setup failed: cannot create the job's log: {e}");
                return record.end(JobStatus::Failed, message, Some("RUNTIME_ENV_SETUP_FAILURE"));
            }
        };
        let mut written = attach_from.unwrap_or(0);
        log_tx.send_replace(written);
        let mut retry = REATTACH_FIRST_WAIT;
        loop {
            let Some(event) = events.recv().await else {
                // The stream broke before the job's end: a network blip or a restarting agent. The job
                // runs on while its node is alive; re-attach from what the log holds.
                if !remote.node_alive(&node).await {
                    break;
                }
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(REATTACH_MAX_WAIT);
                let again = remote::RemoteRun { attach_from: Some(written), packages: Vec::new(), ..run.clone() };
                match remote.run(&node, again).await {
                    Ok(more) => events = more,
                    Err(e) => {
                        tracing::debug!("re-attaching to job {} on node {node} failed: {e}", record.submission_id);
                        // An empty channel: the next round asks whether the node is alive again.
                        events = tokio::sync::mpsc::channel(1).1;
                    }
                }
                continue;
            };
            retry = REATTACH_FIRST_WAIT;
            match event {
                remote::RemoteEvent::Started { pid } => {
                    tracing::debug!("job {} started on node {node} as pid {pid}", record.submission_id);
                    record.status = JobStatus::Running;
                    record.message = MSG_RUNNING.into();
                    record.node = Some(node.clone());
                    self.put(record);
                    if *stop.borrow() {
                        let _ = remote.stop(&node, &run_id).await;
                    }
                }
                remote::RemoteEvent::Output(bytes) => {
                    use std::io::Write;
                    if let Err(e) = log.write_all(&bytes) {
                        tracing::warn!("cannot append to the log of job {}: {e}", record.submission_id);
                    }
                    written += bytes.len() as u64;
                    log_tx.send_replace(written);
                }
                remote::RemoteEvent::SetupFailed(_) if *stop.borrow() => {
                    return record.end(JobStatus::Stopped, MSG_STOPPED.into(), None);
                }
                remote::RemoteEvent::SetupFailed(e) => {
                    let message = format!("runtime_env setup failed on node {node}: {e}");
                    return record.end(JobStatus::Failed, message, Some("RUNTIME_ENV_SETUP_FAILURE"));
                }
                remote::RemoteEvent::StartFailed(e) => {
                    let message = format!("Job entrypoint command failed to start on node {node}: {e}");
                    return record.end(JobStatus::Failed, message, Some("JOB_ENTRYPOINT_COMMAND_START_ERROR"));
                }
                remote::RemoteEvent::Exited(code) => return self.record_exit(record, code, *stop.borrow()),
            }
        }
        let message = format!("The node {node} running this job died before the job ended");
        record.end(JobStatus::Failed, message, Some("JOB_SUPERVISOR_ACTOR_DIED"));
    }

    /// Gives back the job's resources, writes its final record once, and forgets it as live.
    async fn finish(&self, record: JobRecord) {
        if let Some(scheduler) = &self.config.resources
            && !record.resources.is_empty()
        {
            scheduler.release(&record.submission_id).await;
        }
        self.put(&record);
        let _ = std::fs::remove_file(self.exit_path(&record.submission_id));
        self.live.lock().remove(&record.submission_id);
        self.ended.notify_waiters();
    }

    /// Stops every live job and waits (a grace time at most) for their final
    /// records: the head is shutting down, and its jobs go with it.
    pub async fn stop_all(&self) {
        self.shutting_down.store(true, std::sync::atomic::Ordering::SeqCst);
        let ids: Vec<String> = self.live.lock().keys().cloned().collect();
        for id in ids {
            let _ = self.stop(&id);
        }
        let all_ended = async {
            loop {
                let ended = self.ended.notified();
                if self.live.lock().is_empty() {
                    return;
                }
                ended.await;
            }
        };
        let _ = tokio::time::timeout(STOP_GRACE + Duration::from_secs(2), all_ended).await;
    }

    /// Waits PENDING until the entrypoint's resources are held; `Err` ends the
    /// job (stopped meanwhile, never schedulable, or waited too long).
    async fn hold_resources(
        &self,
        record: &JobRecord,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<HeldOn, (JobStatus, String, Option<&'static str>)> {
        let Some(scheduler) = self.config.resources.as_ref().filter(|_| !record.resources.is_empty()) else {
            return Ok(HeldOn::ThisNode);
        };
        let timeout = start_timeout();
        tokio::select! {
            held = tokio::time::timeout(timeout, scheduler.hold(&record.submission_id, &record.resources)) => match held {
                Ok(Ok(placed)) => Ok(placed),
                Ok(Err(HoldError::Unschedulable(reason))) => Err((
                    JobStatus::Failed,
                    format!("The job's entrypoint resources {:?} cannot be scheduled: {reason}", record.resources),
                    Some("JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE"),
                )),
                Ok(Err(HoldError::Failed(reason))) => Err((
                    JobStatus::Failed,
                    format!("The job's entrypoint resources {:?} could not be reserved: {reason}", record.resources),
                    Some("JOB_SUPERVISOR_ACTOR_START_FAILURE"),
                )),
                Err(_) => Err((
                    JobStatus::Failed,
                    format!(
                        "Job supervisor actor failed to start within {:.1} seconds (its entrypoint resources {:?} \
                         never became free). This timeout can be configured by setting the environment variable \
                         RAY_JOB_START_TIMEOUT_SECONDS.",
                        timeout.as_secs_f64(),
                        record.resources
                    ),
                    Some("JOB_SUPERVISOR_ACTOR_START_TIMEOUT"),
                )),
            },
            _ = stop.wait_for(|stopped| *stopped) => Err((JobStatus::Stopped, MSG_STOPPED.into(), None)),
        }
    }

    /// Holds its resources, prepares the working_dir, runs the entrypoint and
    /// waits for it; `record` ends up saying how the job ended.
    async fn supervise(
        self: &Arc<Self>,
        record: &mut JobRecord,
        mut stop: watch::Receiver<bool>,
        log_tx: watch::Sender<u64>,
    ) {
        match self.hold_resources(record, &mut stop).await {
            Err((status, message, error_type)) => return record.end(status, message, error_type),
            Ok(HeldOn::Node { node, group }) => {
                record.group = Some(group);
                return self.run_remote(record, node, &stop, log_tx, None).await;
            }
            Ok(HeldOn::ThisNode) => {}
        }
        let stopped = || *stop.borrow();
        // A stop (or the head's shutdown) kills the setup's commands; so does its deadline.
        let control = runtime_env::SetupControl::for_runtime_env(&record.runtime_env);
        let watcher = {
            let (mut stop, flag) = (stop.clone(), control.stop_flag());
            tokio::spawn(async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        let prepared = {
            let manager = self.clone();
            let record = record.clone();
            // A setup thread that panicked fails the job like a failed setup, its panic as the reason.
            tokio::task::spawn_blocking(move || manager.prepare(&record, &control))
                .await
                .map_err(|e| e.to_string())
                .and_then(|prepared| prepared.map_err(|e| e.to_string()))
        };
        watcher.abort();
        let (prepared, log) = match prepared {
            Ok(ready) => ready,
            Err(_) if stopped() => return record.end(JobStatus::Stopped, MSG_STOPPED.into(), None),
            Err(e) => {
                let message = format!("runtime_env setup failed: {e}");
                return record.end(JobStatus::Failed, message, Some("RUNTIME_ENV_SETUP_FAILURE"));
            }
        };
        if stopped() {
            // Stopped while its working_dir was prepared: it never starts.
            return record.end(JobStatus::Stopped, MSG_STOPPED.into(), None);
        }
        let child = match self.spawn(record, &prepared, log) {
            Ok(child) => child,
            Err(e) => {
                let message = format!("Job entrypoint command failed to start: {e}");
                return record.end(JobStatus::Failed, message, Some("JOB_ENTRYPOINT_COMMAND_START_ERROR"));
            }
        };
        record.status = JobStatus::Running;
        record.message = MSG_RUNNING.into();
        record.pid = child.id();
        record.pid_start = record.pid.and_then(process_start_ticks);
        self.put(record);
        if stopped() {
            // A stop that came while the process was starting.
            self.signal_stop(record);
        }
        self.follow(record, Process::Child(child), &stop, log_tx).await;
    }

    /// Waits for a running job's process while its log's watch follows the
    /// file, then records how it ended.
    async fn follow(
        &self,
        record: &mut JobRecord,
        process: Process,
        stop: &watch::Receiver<bool>,
        log_tx: watch::Sender<u64>,
    ) {
        let (exited, exited_rx) = tokio::sync::oneshot::channel();
        let watcher = tokio::spawn(watch_log(self.log_path(&record.submission_id), log_tx, exited_rx));
        let code = match process {
            Process::Child(mut child) => child.wait().await.ok().map(entrypoint::child_exit_code),
            Process::Adopted { pid, start } => {
                wait_for_exit(pid, start).await;
                self.read_exit_code(&record.submission_id)
            }
        };
        let _ = exited.send(());
        let _ = watcher.await;
        let stopped = *stop.borrow();
        self.record_exit(record, code, stopped);
    }

    /// Ends the record as the exit code (None: unknown, the process was killed) says.
    fn record_exit(&self, record: &mut JobRecord, code: Option<i32>, stopped: bool) {
        record.driver_exit_code = code;
        if stopped {
            let message = if self.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
                "Job was stopped because the head shut down.".to_string()
            } else {
                MSG_STOPPED.to_string()
            };
            record.end(JobStatus::Stopped, message, None);
        } else if code == Some(0) {
            record.end(JobStatus::Succeeded, MSG_SUCCEEDED.into(), None);
        } else {
            let tail = crate::logs::last_lines(&self.log_path(&record.submission_id), FAILURE_TAIL_LINES, 20_000);
            let what = match code {
                Some(code) => format!("failed with exit code {code}"),
                None => "ended without an exit code (killed while the head was down)".into(),
            };
            let message =
                format!("Job entrypoint command {what}, last available logs (truncated to 20,000 chars):\n{tail}");
            record.end(JobStatus::Failed, message, Some("JOB_ENTRYPOINT_COMMAND_ERROR"));
        }
    }

    /// The job's runtime_env made real (`runtime_env.rs`), and its log file.
    fn prepare(
        &self,
        record: &JobRecord,
        control: &runtime_env::SetupControl,
    ) -> Result<(runtime_env::Prepared, std::fs::File), RuntimeEnvError> {
        let log = oxray_object_store::private_file_options()
            .create(true)
            .append(true)
            .open(self.log_path(&record.submission_id))
            .map_err(RuntimeEnvError::Log)?;
        let prepared = runtime_env::Preparer {
            packages_dir: &self.packages_dir(),
            session_dir: &self.config.session_dir,
            data_dir: &self.config.data_dir,
            python: &self.config.python,
            log: &log,
            control,
        }
        .prepare(&record.runtime_env)?;
        Ok((prepared, log))
    }

    fn spawn(
        &self,
        record: &JobRecord,
        prepared: &runtime_env::Prepared,
        log: std::fs::File,
    ) -> std::io::Result<tokio::process::Child> {
        entrypoint::Entrypoint {
            submission_id: &record.submission_id,
            command: &record.entrypoint,
            runtime_env: &record.runtime_env,
            metadata: &record.metadata,
            head_address: &self.config.head_address,
            token: &self.config.token,
            python: &self.config.python,
            store: &self.config.data_dir,
        }
        .spawn(prepared, log, &self.exit_path(&record.submission_id))
    }

    fn signal_stop(&self, record: &JobRecord) {
        if let (Some(node), Some(remote)) = (record.node.clone(), self.config.remote.clone()) {
            let (id, run_id) = (record.submission_id.clone(), remote_run_id(record));
            tokio::spawn(async move {
                if let Err(e) = remote.stop(&node, &run_id).await {
                    tracing::warn!("cannot stop job {id} (run {run_id}) on node {node}: {e}");
                }
            });
            return;
        }
        let Some(pid) = record.pid else { return };
        // The job is over when its log channel closes.
        let live = self.live.lock().get(&record.submission_id).map(|l| l.log.clone());
        entrypoint::stop_group(pid, live.map(|mut log| async move { while log.changed().await.is_ok() {} }));
    }

    /// `Ok(true)` when a live job was stopped, `Ok(false)` when it had already ended.
    #[tracing::instrument(skip(self))]
    pub fn stop(&self, id: &str) -> Result<bool, JobError> {
        let record = self.get(id)?;
        if record.status.is_terminal() {
            return Ok(false);
        }
        let id = record.submission_id.as_str();
        let Some(stop) = self.live.lock().get(id).map(|l| l.stop.clone()) else { return Ok(false) };
        // A pending job sees the flag before it starts (its setup is killed); a running one gets
        // the signals too.
        stop.send_replace(true);
        if record.status == JobStatus::Pending {
            // Recorded at once: a head restarted before the supervisor writes it must not start it again.
            let mut stopped = record.clone();
            stopped.end(JobStatus::Stopped, MSG_STOPPED.into(), None);
            self.put(&stopped);
        }
        self.signal_stop(&record);
        Ok(true)
    }

    /// Removes a finished job's record (its log stays, as in Ray).
    #[tracing::instrument(skip(self))]
    pub fn delete(&self, id: &str) -> Result<(), JobError> {
        let record = self.get(id)?;
        if !record.status.is_terminal() {
            return Err(JobError::NotTerminal { id: id.to_string(), status: record.status });
        }
        self.store.remove(&record.submission_id)?;
        Ok(())
    }

    /// The log file of job `id` (which must be kept), to read in bounded pieces (`logs.rs`);
    /// it may not exist yet.
    pub fn job_log_path(&self, id: &str) -> Result<PathBuf, JobError> {
        Ok(self.log_path(&self.get(id)?.submission_id))
    }

    /// A watch on the job's output while it runs (None once it has ended).
    pub fn log_watch(&self, id: &str) -> Option<watch::Receiver<u64>> {
        self.live.lock().get(id).map(|l| l.log.clone())
    }

    /// Stores an upload once it checks out (`Err` is the 400's reason).
    pub fn store_package(&self, key: &str, data: &[u8]) -> Result<(), JobError> {
        packages::check_zip(data)?;
        self.write_package(key, data).map_err(JobError::StorePackage)
    }

    fn write_package(&self, key: &str, data: &[u8]) -> std::io::Result<()> {
        let dir = self.packages_dir();
        let tmp = dir.join(format!(".{key}.{}.tmp", std::process::id()));
        oxray_object_store::write_private_file(&tmp, data)?;
        std::fs::rename(&tmp, dir.join(key))
    }

    pub fn has_package(&self, key: &str) -> bool {
        self.packages_dir().join(key).is_file()
    }
}

/// This user's processes whose environment says they belong to job `id` of
/// the head keeping its jobs in `data_dir` (`OXRAY_JOB_SUBMISSION_ID` and
/// `OXRAY_JOB_STORE`, which a job's processes inherit), so another cluster's job
/// with the same id is never touched.
fn processes_of_job(data_dir: &Path, id: &str) -> Vec<u32> {
    let job = format!("{JOB_ID_VAR}={id}");
    let store = format!("{JOB_STORE_VAR}={}", data_dir.display());
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                let mut vars = env.split(|&b| b == 0);
                let (mut has_job, mut has_store) = (false, false);
                for var in &mut vars {
                    has_job |= var == job.as_bytes();
                    has_store |= var == store.as_bytes();
                }
                has_job && has_store
            })
        })
        .collect()
}

/// The run id a remote job's node knows it by; a record from before run ids names its run by
/// the submission id, as the node did then.
fn remote_run_id(record: &JobRecord) -> String {
    record.run_id.clone().unwrap_or_else(|| record.submission_id.clone())
}

/// A submission's `JobDetails`, with its latest driver's ids when it has one.
fn linked(record: &JobRecord, drivers: &[drivers::DriverRow], redact: bool) -> JobDetails {
    let mut details = record.details(redact);
    let driver = drivers
        .iter()
        .filter(|d| d.submission_id.as_deref() == Some(record.submission_id.as_str()))
        .max_by_key(|d| d.start_time);
    if let Some(driver) = driver {
        driver.link(&mut details);
    }
    details
}

/// How a running job's process is waited for.
enum Process {
    /// Started by this head: its child.
    Child(tokio::process::Child),
    /// Started by a previous head: followed by pid (checked by its start time).
    Adopted { pid: u32, start: u64 },
}

/// How often a running job's log file is checked for growth (for `/logs/tail`).
const LOG_POLL: Duration = Duration::from_millis(100);

/// Publishes the log file's length while the job runs; the watch closes (its
/// sender dropped) once the job has exited and the last length is out.
async fn watch_log(path: PathBuf, log_tx: watch::Sender<u64>, mut exited: tokio::sync::oneshot::Receiver<()>) {
    loop {
        let done = matches!(exited.try_recv(), Ok(()) | Err(tokio::sync::oneshot::error::TryRecvError::Closed));
        let len = tokio::fs::metadata(&path).await.map(|m| m.len()).unwrap_or(0);
        log_tx.send_if_modified(|seen| std::mem::replace(seen, len) != len);
        if done {
            return;
        }
        tokio::select! {
            _ = &mut exited => {}
            _ = tokio::time::sleep(LOG_POLL) => {}
        }
    }
}

/// The span a job's whole life runs in, so every event of it names the job.
fn job_span(record: &JobRecord) -> tracing::Span {
    tracing::info_span!("job", id = %record.submission_id)
}

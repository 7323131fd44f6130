//! A job's `runtime_env` made real before its entrypoint starts: the
//! working_dir (an upload, a directory on the head, or an `s3://` zip),
//! `py_modules` (uploads, directories on the head, `s3://` zips; wheels are
//! installed with pip), and `pip` (a virtualenv layered on the cluster's
//! environment, cached by the hash of what it installs).
//!
//! Runs on a blocking thread; S3 reads block on the head's runtime. Every command it runs (venv,
//! pip) is a process group of its own that dies with the thread that started it, and is killed
//! when the job is stopped or its setup outlives `setup_timeout_seconds` (`SetupControl`).

use crate::packages::{self, PackageError};
use serde_json::{Map, Value};
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The largest `s3://` archive a job may name (as large as an upload may unpack to).
const MAX_REMOTE_ARCHIVE_BYTES: u64 = 512 << 20;
/// Lines of pip's output quoted when it fails.
const PIP_FAILURE_LINES: usize = 20;

/// Why a job's runtime_env could not be set up; shown after "runtime_env setup failed: ".
/// `what` names the step (`pip install`, `working_dir`, ...).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeEnvError {
    #[error("{what} was killed: the job was stopped")]
    Stopped { what: &'static str },
    #[error(
        "{what} was killed: the runtime_env setup timed out after {seconds} seconds \
         (runtime_env config setup_timeout_seconds)"
    )]
    TimedOut { what: &'static str, seconds: u64 },
    /// An uploaded package's name, or an archive, was refused or could not be unpacked.
    #[error(transparent)]
    Package(#[from] PackageError),
    #[error("cannot create {}: {source}", .path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot read {}: {source}", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {}: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot open {}: {source}", .path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot lock {}: {source}", .path.display())]
    Lock { path: PathBuf, source: std::io::Error },
    #[error("cannot move {} to {}: {source}", .from.display(), .to.display())]
    Move { from: PathBuf, to: PathBuf, source: std::io::Error },
    #[error("cannot create the job's log: {0}")]
    Log(#[source] std::io::Error),
    #[error("working_dir {dir:?} is not a directory on the head")]
    WorkingDirMissing { dir: String },
    #[error("package {uri} was never uploaded (PUT /api/packages/gcs/<name> first)")]
    NotUploaded { uri: String },
    /// A package a remote node needs could not be read from the head's store.
    #[error("package {uri} was never uploaded (PUT /api/packages/gcs/<name> first): {source}")]
    PackageUnreadable { uri: String, source: std::io::Error },
    #[error("py_modules entry {uri:?} is not a directory on the head")]
    ModuleMissing { uri: String },
    #[error("cannot link py_module {uri:?} into {}: {source}", .holder.display())]
    LinkModule { uri: String, holder: PathBuf, source: std::io::Error },
    #[error("py_modules wheel {uri:?} is not a file on the head")]
    WheelMissing { uri: String },
    #[error("cannot stage wheel {uri}: {source}")]
    StageWheel { uri: String, source: std::io::Error },
    #[error("{what} {uri:?}: remote archives must be .zip files (or .whl wheels in py_modules)")]
    NotAnArchive { what: &'static str, uri: String },
    #[error("{what} {uri:?}: {source}")]
    Location { what: &'static str, uri: String, source: Box<oxray_io::StorageError> },
    #[error("cannot read {what} {uri:?}: {source}")]
    Fetch { what: &'static str, uri: String, source: Box<object_store::Error> },
    #[error("{what} {uri:?} is {size} bytes, over the {} MiB limit", MAX_REMOTE_ARCHIVE_BYTES >> 20)]
    TooLarge { what: &'static str, uri: String, size: u64 },
    #[error("{what} {uri:?}: {source}")]
    BadArchive { what: &'static str, uri: String, source: PackageError },
    #[error("cannot store {uri}: {source}")]
    Store { uri: String, source: std::io::Error },
    #[error("cannot read the pip requirements file {file:?} on the head: {source}")]
    Requirements { file: String, source: std::io::Error },
    #[error("runtime_env[\"pip\"] packages must be a list or a file, got {got}")]
    PipPackages { got: Value },
    #[error("cannot run {python}: {source}")]
    Python { python: String, source: std::io::Error },
    #[error("cannot mark {} ready: {source}", .venv.display())]
    MarkReady { venv: PathBuf, source: std::io::Error },
    #[error("the virtualenv {} has no site-packages", .venv.display())]
    NoSitePackages { venv: PathBuf },
    #[error("{what} could not start ({python}): {source}")]
    Start { what: &'static str, python: String, source: std::io::Error },
    #[error("{what}: cannot wait for it: {source}")]
    Wait { what: &'static str, source: std::io::Error },
    /// A setup command exited unsuccessfully; `tail` is its output's last lines.
    #[error("{what} failed ({status}):\n{tail}")]
    Failed { what: &'static str, status: ExitStatus, tail: String },
}

/// What the entrypoint's environment gets from its runtime_env.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Its working directory (first on PYTHONPATH too).
    pub cwd: PathBuf,
    /// Directories to put on PYTHONPATH after the working directory, in order.
    pub python_path: Vec<PathBuf>,
    /// Its virtualenv, when it installs anything with pip.
    pub venv: Option<PathBuf>,
}

/// Ray's default for `runtime_env["config"]["setup_timeout_seconds"]`.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(600);

/// How often a setup command is checked for a stop or its deadline.
const SETUP_POLL: Duration = Duration::from_millis(50);

/// What can end a job's setup early: its stop, and its deadline.
#[derive(Clone, Debug)]
pub struct SetupControl {
    stop: Arc<AtomicBool>,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
}

impl SetupControl {
    /// A setup that may run for `timeout` (None: as long as it takes), from now.
    pub fn new(timeout: Option<Duration>) -> Self {
        SetupControl { stop: Arc::new(AtomicBool::new(false)), timeout, deadline: timeout.map(|t| Instant::now() + t) }
    }

    /// The timeout a runtime_env asks for (`config.setup_timeout_seconds`, -1 for none), else Ray's 600 s.
    pub fn for_runtime_env(env: &Map<String, Value>) -> Self {
        let asked = env.get("config").and_then(|c| c.get("setup_timeout_seconds")).and_then(Value::as_i64);
        Self::new(match asked {
            Some(seconds) if seconds < 0 => None,
            Some(seconds) => Some(Duration::from_secs(seconds as u64)),
            None => Some(DEFAULT_SETUP_TIMEOUT),
        })
    }

    /// The flag that stops the setup (the job was stopped, or the server is shutting down).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Whether the job was stopped.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// `Err` once the setup must end: why.
    fn check(&self, what: &'static str) -> Result<(), RuntimeEnvError> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(RuntimeEnvError::Stopped { what });
        }
        if let (Some(deadline), Some(timeout)) = (self.deadline, self.timeout)
            && Instant::now() >= deadline
        {
            return Err(RuntimeEnvError::TimedOut { what, seconds: timeout.as_secs() });
        }
        Ok(())
    }
}

/// Where the pieces come from and go.
pub struct Preparer<'a> {
    /// Uploaded packages (`gcs_<name>` files) and downloaded archives.
    pub packages_dir: &'a Path,
    /// Unpacked working_dirs and py_modules (`runtime_resources/`).
    pub session_dir: &'a Path,
    /// Cached virtualenvs (`runtime_resources/pip/`), kept across restarts.
    pub data_dir: &'a Path,
    /// The cluster's Python, which the virtualenvs are layered on.
    pub python: &'a str,
    /// The job's log: pip's output goes there.
    pub log: &'a File,
    /// The job's stop and the setup's deadline.
    pub control: &'a SetupControl,
}

/// The file an uploaded package `gcs://<name>` is stored as (`Err` for a name
/// that is not a plain file name).
pub fn package_file_name(name: &str) -> Result<String, PackageError> {
    packages::package_key("gcs", name)
}

/// A stable short hash for cache names (not a security boundary: only token holders submit).
fn short_hash(parts: &[&str]) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    parts.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

fn create_dir(dir: &Path) -> Result<(), RuntimeEnvError> {
    oxray_object_store::create_private_dir_all(dir)
        .map_err(|source| RuntimeEnvError::CreateDir { path: dir.to_path_buf(), source })
}

/// The file name at the end of a URI or path.
fn base_name(uri: &str) -> &str {
    uri.rsplit('/').next().unwrap_or(uri)
}

impl Preparer<'_> {
    fn resources_dir(&self, kind: &str) -> Result<PathBuf, RuntimeEnvError> {
        let dir = self.session_dir.join("runtime_resources").join(kind);
        create_dir(&dir)?;
        Ok(dir)
    }

    #[tracing::instrument(skip_all, fields(keys = ?env.keys().collect::<Vec<_>>()))]
    pub fn prepare(&self, env: &Map<String, Value>) -> Result<Prepared, RuntimeEnvError> {
        let mut prepared = Prepared { cwd: self.session_dir.to_path_buf(), ..Default::default() };
        if let Some(dir) = env.get("working_dir").and_then(Value::as_str) {
            prepared.cwd = self.working_dir(dir)?;
        }
        let mut wheels = Vec::new();
        for module in env.get("py_modules").and_then(Value::as_array).into_iter().flatten() {
            let uri = module.as_str().unwrap_or_default();
            if uri.ends_with(".whl") {
                wheels.push(self.wheel(uri)?);
            } else {
                prepared.python_path.push(self.py_module(uri)?);
            }
        }
        let pip = env.get("pip").map(|spec| self.pip_spec(spec)).transpose()?;
        if pip.is_some() || !wheels.is_empty() {
            let (mut requirements, options, check) = pip.unwrap_or_default();
            requirements.extend(wheels.iter().map(|w| w.display().to_string()));
            let venv = self.virtualenv(&requirements, &options, check)?;
            prepared.python_path.push(site_packages(&venv)?);
            prepared.venv = Some(venv);
        }
        Ok(prepared)
    }

    fn working_dir(&self, dir: &str) -> Result<PathBuf, RuntimeEnvError> {
        if Path::new(dir).is_absolute() {
            if !Path::new(dir).is_dir() {
                return Err(RuntimeEnvError::WorkingDirMissing { dir: dir.to_string() });
            }
            return Ok(PathBuf::from(dir));
        }
        let root = self.resources_dir("working_dir_files")?;
        if dir.starts_with("s3://") {
            let archive = self.fetch_s3(dir, "working_dir")?;
            let target = unpacked_dir(&root, &archive)?;
            unpack_once(&archive, &target)?;
            // A remote archive holds one top-level directory: its contents are the working_dir (as in Ray).
            return Ok(single_top_dir(&target));
        }
        let package = self.uploaded(dir)?;
        let target = unpacked_dir(&root, &package)?;
        unpack_once(&package, &target)?;
        Ok(target)
    }

    /// An uploaded `gcs://` package, which must be there.
    fn uploaded(&self, uri: &str) -> Result<PathBuf, RuntimeEnvError> {
        let package = packages::package_path(self.packages_dir, uri)?;
        if !package.is_file() {
            return Err(RuntimeEnvError::NotUploaded { uri: uri.to_string() });
        }
        Ok(package)
    }

    /// A py_module's import root: the directory to put on PYTHONPATH.
    fn py_module(&self, uri: &str) -> Result<PathBuf, RuntimeEnvError> {
        let root = self.resources_dir("py_modules_files")?;
        if Path::new(uri).is_absolute() {
            // A directory on the head: reachable by its own name only, through a link in a directory of its own.
            let module = Path::new(uri);
            if !module.is_dir() {
                return Err(RuntimeEnvError::ModuleMissing { uri: uri.to_string() });
            }
            let holder = root.join(format!("local_{}", short_hash(&[uri])));
            let link = holder.join(base_name(uri.trim_end_matches('/')));
            if !link.exists() {
                create_dir(&holder)?;
                std::os::unix::fs::symlink(module, &link).map_err(|source| RuntimeEnvError::LinkModule {
                    uri: uri.to_string(),
                    holder: holder.clone(),
                    source,
                })?;
            }
            return Ok(holder);
        }
        let archive = if uri.starts_with("s3://") { self.fetch_s3(uri, "py_module")? } else { self.uploaded(uri)? };
        let target = unpacked_dir(&root, &archive)?;
        unpack_once(&archive, &target)?;
        Ok(target)
    }

    /// A wheel named in py_modules, as a file pip can install (keeping its name, which pip reads).
    fn wheel(&self, uri: &str) -> Result<PathBuf, RuntimeEnvError> {
        if Path::new(uri).is_absolute() {
            return if Path::new(uri).is_file() {
                Ok(PathBuf::from(uri))
            } else {
                Err(RuntimeEnvError::WheelMissing { uri: uri.to_string() })
            };
        }
        let stored = if uri.starts_with("s3://") { self.fetch_s3(uri, "py_module")? } else { self.uploaded(uri)? };
        let dir = self.resources_dir("wheels")?.join(short_hash(&[&stored.display().to_string()]));
        let wheel = dir.join(base_name(uri));
        if !wheel.is_file() {
            create_dir(&dir)?;
            std::fs::copy(&stored, &wheel)
                .map_err(|source| RuntimeEnvError::StageWheel { uri: uri.to_string(), source })?;
        }
        Ok(wheel)
    }

    /// Downloads an `s3://` archive once per version (its ETag) into the packages directory.
    #[tracing::instrument(skip(self))]
    fn fetch_s3(&self, uri: &str, what: &'static str) -> Result<PathBuf, RuntimeEnvError> {
        let name = base_name(uri);
        if !(name.ends_with(".zip") || name.ends_with(".whl")) {
            return Err(RuntimeEnvError::NotAnArchive { what, uri: uri.to_string() });
        }
        // Boxed: the store's errors are large, and every setup step returns this type.
        let fetch = |e| RuntimeEnvError::Fetch { what, uri: uri.to_string(), source: Box::new(e) };
        let store_error = |source| RuntimeEnvError::Store { uri: uri.to_string(), source };
        let handle = tokio::runtime::Handle::current();
        handle.block_on(async {
            use object_store::ObjectStoreExt;
            let (store, key) = oxray_io::object_store_for_uri(uri).map_err(|e| RuntimeEnvError::Location {
                what,
                uri: uri.to_string(),
                source: Box::new(e),
            })?;
            let path = object_store::path::Path::from(key);
            let meta = store.head(&path).await.map_err(fetch)?;
            if meta.size > MAX_REMOTE_ARCHIVE_BYTES {
                return Err(RuntimeEnvError::TooLarge { what, uri: uri.to_string(), size: meta.size });
            }
            let version = meta.e_tag.clone().unwrap_or_else(|| meta.last_modified.to_rfc3339());
            let dir = self.packages_dir.join(format!("s3_{}", short_hash(&[uri, &version])));
            let file = dir.join(name);
            if file.is_file() {
                return Ok(file);
            }
            let data = store.get(&path).await.map_err(fetch)?;
            let bytes = data.bytes().await.map_err(fetch)?;
            packages::check_zip(&bytes).map_err(|source| RuntimeEnvError::BadArchive {
                what,
                uri: uri.to_string(),
                source,
            })?;
            create_dir(&dir)?;
            let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
            oxray_object_store::write_private_file(&tmp, &bytes).map_err(store_error)?;
            std::fs::rename(&tmp, &file).map_err(store_error)?;
            Ok(file)
        })
    }

    /// `pip` as Ray takes it: a list of requirements, a requirements file on
    /// the head, or `{"packages": ..., "pip_check": bool, "pip_install_options": [...]}`.
    fn pip_spec(&self, spec: &Value) -> Result<(Vec<String>, Vec<String>, bool), RuntimeEnvError> {
        let lines = |packages: &Value| -> Result<Vec<String>, RuntimeEnvError> {
            match packages {
                Value::Array(items) => Ok(items.iter().filter_map(Value::as_str).map(str::to_string).collect()),
                Value::String(file) => std::fs::read_to_string(file)
                    .map(|text| text.lines().map(str::to_string).collect())
                    .map_err(|source| RuntimeEnvError::Requirements { file: file.clone(), source }),
                other => Err(RuntimeEnvError::PipPackages { got: other.clone() }),
            }
        };
        match spec {
            Value::Object(fields) => {
                let packages = lines(fields.get("packages").unwrap_or(&Value::Null))?;
                let options = fields
                    .get("pip_install_options")
                    .and_then(Value::as_array)
                    .map(|o| o.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default();
                Ok((packages, options, fields.get("pip_check").and_then(Value::as_bool).unwrap_or(false)))
            }
            other => Ok((lines(other)?, Vec::new(), false)),
        }
    }

    /// A virtualenv with `requirements` installed over the cluster's packages,
    /// built once per distinct request (others wait on its lock and reuse it). It is built
    /// under a temporary name and renamed into place when complete, so the name it is used
    /// by only ever holds a whole venv, whatever stopped an earlier build.
    #[tracing::instrument(skip(self, options))]
    fn virtualenv(&self, requirements: &[String], options: &[String], check: bool) -> Result<PathBuf, RuntimeEnvError> {
        let root = self.data_dir.join("runtime_resources").join("pip");
        create_dir(&root)?;
        let key = short_hash(&[self.python, &requirements.join("\n"), &options.join("\n"), &check.to_string()]);
        let venv = root.join(&key);
        let _lock = FileLock::acquire(&root.join(format!("{key}.lock")), self.control)?;
        if venv.join(READY_MARKER).is_file() {
            return Ok(venv);
        }
        // What an earlier, killed build left (under the lock, no build of this key runs now).
        let _ = std::fs::remove_dir_all(&venv);
        let building = root.join(format!("{key}.building"));
        let _ = std::fs::remove_dir_all(&building);
        let built = self
            .build_virtualenv(&building, requirements, options, check)
            .and_then(|()| point_scripts_at(&building, &venv))
            .and_then(|()| {
                std::fs::rename(&building, &venv).map_err(|source| RuntimeEnvError::Move {
                    from: building.clone(),
                    to: venv.clone(),
                    source,
                })
            });
        if built.is_err() {
            let _ = std::fs::remove_dir_all(&building);
        }
        built.map(|()| venv)
    }

    fn build_virtualenv(
        &self,
        venv: &Path,
        requirements: &[String],
        options: &[String],
        check: bool,
    ) -> Result<(), RuntimeEnvError> {
        let mut log = self.log;
        let _ = writeln!(log, "oxray: creating a virtualenv with {requirements:?} in {}", venv.display());
        self.run(Command::new(self.python).args(["-m", "venv", "--without-pip"]).arg(venv), "python -m venv")?;
        // The cluster's packages stay importable (and count as installed for pip) behind the venv's own.
        let cluster_paths = Command::new(self.python)
            .args(["-c", "import site, sysconfig; print('\\n'.join(dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']])))"])
            .output()
            .map_err(|source| RuntimeEnvError::Python { python: self.python.to_string(), source })?;
        let site = site_packages(venv)?;
        // `addsitedir` rather than bare paths, so the cluster's own `.pth` files (editable installs) apply too.
        let pth: String = String::from_utf8_lossy(&cluster_paths.stdout)
            .lines()
            .filter(|line| !line.is_empty())
            .map(|dir| format!("import site; site.addsitedir({})\n", Value::String(dir.to_string())))
            .collect();
        std::fs::write(site.join("_oxray_cluster.pth"), pth)
            .map_err(|source| RuntimeEnvError::Write { path: site.clone(), source })?;
        let requirements_file = venv.join("requirements.txt");
        std::fs::write(&requirements_file, requirements.join("\n") + "\n")
            .map_err(|source| RuntimeEnvError::Write { path: requirements_file.clone(), source })?;
        let venv_python = venv.join("bin").join("python");
        let mut install = Command::new(self.python);
        install.args(["-m", "pip", "--python"]).arg(&venv_python);
        install.args(["install", "--disable-pip-version-check", "--no-input"]).args(options);
        install.arg("-r").arg(&requirements_file);
        self.run(&mut install, "pip install")?;
        if check {
            let mut pip_check = Command::new(self.python);
            pip_check.args(["-m", "pip", "--python"]).arg(&venv_python).args(["check", "--disable-pip-version-check"]);
            self.run(&mut pip_check, "pip check")?;
        }
        File::create(venv.join(READY_MARKER))
            .map_err(|source| RuntimeEnvError::MarkReady { venv: venv.to_path_buf(), source })?;
        Ok(())
    }

    /// Runs a setup command with its output in the job's log; `Err` quotes its last lines. It
    /// leads a process group of its own, which is killed when the job is stopped or the setup's
    /// deadline passes, and dies with this thread (`PR_SET_PDEATHSIG`) should the server die.
    fn run(&self, command: &mut Command, what: &'static str) -> Result<(), RuntimeEnvError> {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        self.control.check(what)?;
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        // SAFETY: runs in the child between fork and exec, and only calls prctl, which is
        // async-signal-safe; it asks for SIGKILL when the thread that forked it ends.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|source| RuntimeEnvError::Start {
            what,
            python: self.python.to_string(),
            source,
        })?;
        let group = child.id() as libc::pid_t;
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
        let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(source) => return Err(RuntimeEnvError::Wait { what, source }),
            }
            if let Err(why) = self.control.check(what) {
                // SAFETY: killpg only sends a signal, to the group this child leads.
                unsafe { libc::killpg(group, libc::SIGKILL) };
                let _ = child.wait();
                let mut log = self.log;
                let _ = log.write_all(&stdout.join().unwrap_or_default());
                let _ = log.write_all(&stderr.join().unwrap_or_default());
                let _ = writeln!(log, "oxray: {why}");
                return Err(why);
            }
            std::thread::sleep(SETUP_POLL);
        };
        let (stdout, stderr) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
        let mut log = self.log;
        let _ = log.write_all(&stdout);
        let _ = log.write_all(&stderr);
        if status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&stderr).into_owned() + &String::from_utf8_lossy(&stdout);
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(PIP_FAILURE_LINES)..].join("\n");
        Err(RuntimeEnvError::Failed { what, status, tail })
    }
}

/// The file a virtualenv's build writes last: a venv without it is not used.
const READY_MARKER: &str = ".oxray-ready";

/// A script in `bin/` larger than this is not one pip or venv wrote.
const MAX_SCRIPT_BYTES: u64 = 1 << 20;

/// Rewrites the scripts of the venv built at `built` (its console scripts' shebangs, the
/// `activate` scripts, `pyvenv.cfg`) to name `target`, where it is about to be renamed to:
/// venv and pip write the absolute path they built at.
fn point_scripts_at(built: &Path, target: &Path) -> Result<(), RuntimeEnvError> {
    let (from, to) = (built.as_os_str().as_encoded_bytes(), target.as_os_str().as_encoded_bytes());
    let bin = built.join("bin");
    let entries = std::fs::read_dir(&bin).map_err(|source| RuntimeEnvError::Read { path: bin.clone(), source })?;
    let files = entries.filter_map(Result::ok).map(|e| e.path()).chain([built.join("pyvenv.cfg")]);
    for path in files {
        // `bin/python` and its kin are links to the interpreter: left alone.
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !meta.is_file() || meta.len() > MAX_SCRIPT_BYTES {
            continue;
        }
        let text = std::fs::read(&path).map_err(|source| RuntimeEnvError::Read { path: path.clone(), source })?;
        if !text.windows(from.len()).any(|w| w == from) {
            continue;
        }
        let mut rewritten = Vec::with_capacity(text.len());
        let mut rest = text.as_slice();
        while let Some(at) = rest.windows(from.len()).position(|w| w == from) {
            rewritten.extend_from_slice(&rest[..at]);
            rewritten.extend_from_slice(to);
            rest = &rest[at + from.len()..];
        }
        rewritten.extend_from_slice(rest);
        // Written in place: the file keeps its mode (scripts stay executable).
        std::fs::write(&path, rewritten).map_err(|source| RuntimeEnvError::Write { path: path.clone(), source })?;
    }
    Ok(())
}

/// `lib/pythonX.Y/site-packages` of a virtualenv.
fn site_packages(venv: &Path) -> Result<PathBuf, RuntimeEnvError> {
    let lib = venv.join("lib");
    let entries = std::fs::read_dir(&lib).map_err(|source| RuntimeEnvError::Read { path: lib.clone(), source })?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.is_dir())
        .ok_or_else(|| RuntimeEnvError::NoSitePackages { venv: venv.to_path_buf() })
}

/// Where `archive` is unpacked under `root`: named by its content's SHA-256 (as Ray names
/// packages by hash), after its file name for people reading the directory. A new version of an
/// archive, or another bucket's archive of the same name, is unpacked apart; the same content is
/// unpacked once.
fn unpacked_dir(root: &Path, archive: &Path) -> Result<PathBuf, RuntimeEnvError> {
    use sha2::Digest;
    use std::io::Read;
    let unreadable = |source| RuntimeEnvError::Read { path: archive.to_path_buf(), source };
    let mut file = File::open(archive).map_err(unreadable)?;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(unreadable)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    let stem = archive.file_stem().unwrap_or_default().to_string_lossy();
    Ok(root.join(format!("{stem}_{hex}")))
}

/// Unpacks `archive` into `target` unless an earlier job already did.
fn unpack_once(archive: &Path, target: &Path) -> Result<(), RuntimeEnvError> {
    if target.is_dir() {
        return Ok(());
    }
    Ok(packages::unpack_zip(archive, target)?)
}

/// The one directory `dir` holds, if that is all it holds; else `dir`.
fn single_top_dir(dir: &Path) -> PathBuf {
    let entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|e| e.filter_map(Result::ok).map(|e| e.path()).collect()).unwrap_or_default();
    match entries.as_slice() {
        [only] if only.is_dir() => only.clone(),
        _ => dir.to_path_buf(),
    }
}

/// An exclusive `flock` on a file, released on drop.
struct FileLock(File);

impl FileLock {
    /// Waits for the lock (another job building the same venv holds it) unless `control` ends the setup.
    fn acquire(path: &Path, control: &SetupControl) -> Result<Self, RuntimeEnvError> {
        use std::os::fd::AsRawFd;
        let file = oxray_object_store::private_file_options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|source| RuntimeEnvError::Open { path: path.to_path_buf(), source })?;
        loop {
            // SAFETY: flock on a descriptor this struct owns; LOCK_NB returns at once.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Self(file));
            }
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(RuntimeEnvError::Lock { path: path.to_path_buf(), source: error });
            }
            control.check("waiting for another job's identical virtualenv")?;
            std::thread::sleep(SETUP_POLL);
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: unlocking the descriptor this struct owns.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

//! A job's `runtime_env` made real before its entrypoint starts: the
//! working_dir (an upload, a directory on the head, or an `s3://` zip),
//! `py_modules` (uploads, directories on the head, `s3://` zips; wheels are
//! installed with pip), and `pip` (a virtualenv layered on the cluster's
//! environment, cached by the hash of what it installs).
//!
//! Runs on a blocking thread; S3 reads block on the head's runtime. Every command it runs (venv,
//! pip) is a process group of its own that dies with the thread that started it, and is killed
//! when the job is stopped or its setup outlives `setup_timeout_seconds` (`SetupControl`).

use crate::packages;
use serde_json::{Map, Value};
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The largest `s3://` archive a job may name (as large as an upload may unpack to).
const MAX_REMOTE_ARCHIVE_BYTES: u64 = 512 << 20;
/// Lines of pip's output quoted when it fails.
const PIP_FAILURE_LINES: usize = 20;

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
    fn check(&self, what: &str) -> Result<(), String> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(format!("{what} was killed: the job was stopped"));
        }
        if let (Some(deadline), Some(timeout)) = (self.deadline, self.timeout)
            && Instant::now() >= deadline
        {
            return Err(format!(
                "{what} was killed: the runtime_env setup timed out after {} seconds \
                 (runtime_env config setup_timeout_seconds)",
                timeout.as_secs()
            ));
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
pub fn package_file_name(name: &str) -> Result<String, String> {
    packages::package_key("gcs", name)
}

/// A stable short hash for cache names (not a security boundary: only token holders submit).
fn short_hash(parts: &[&str]) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    parts.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

fn create_dir(dir: &Path) -> Result<(), String> {
    oxray_object_store::create_private_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// The file name at the end of a URI or path.
fn base_name(uri: &str) -> &str {
    uri.rsplit('/').next().unwrap_or(uri)
}

impl Preparer<'_> {
    fn resources_dir(&self, kind: &str) -> Result<PathBuf, String> {
        let dir = self.session_dir.join("runtime_resources").join(kind);
        create_dir(&dir)?;
        Ok(dir)
    }

    #[tracing::instrument(skip_all, fields(keys = ?env.keys().collect::<Vec<_>>()))]
    pub fn prepare(&self, env: &Map<String, Value>) -> Result<Prepared, String> {
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

    fn working_dir(&self, dir: &str) -> Result<PathBuf, String> {
        if Path::new(dir).is_absolute() {
            if !Path::new(dir).is_dir() {
                return Err(format!("working_dir {dir:?} is not a directory on the head"));
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
    fn uploaded(&self, uri: &str) -> Result<PathBuf, String> {
        let package = packages::package_path(self.packages_dir, uri)?;
        if !package.is_file() {
            return Err(format!("package {uri} was never uploaded (PUT /api/packages/gcs/<name> first)"));
        }
        Ok(package)
    }

    /// A py_module's import root: the directory to put on PYTHONPATH.
    fn py_module(&self, uri: &str) -> Result<PathBuf, String> {
        let root = self.resources_dir("py_modules_files")?;
        if Path::new(uri).is_absolute() {
            // A directory on the head: reachable by its own name only, through a link in a directory of its own.
            let module = Path::new(uri);
            if !module.is_dir() {
                return Err(format!("py_modules entry {uri:?} is not a directory on the head"));
            }
            let holder = root.join(format!("local_{}", short_hash(&[uri])));
            let link = holder.join(base_name(uri.trim_end_matches('/')));
            if !link.exists() {
                create_dir(&holder)?;
                std::os::unix::fs::symlink(module, &link)
                    .map_err(|e| format!("cannot link py_module {uri:?} into {}: {e}", holder.display()))?;
            }
            return Ok(holder);
        }
        let archive = if uri.starts_with("s3://") { self.fetch_s3(uri, "py_module")? } else { self.uploaded(uri)? };
        let target = unpacked_dir(&root, &archive)?;
        unpack_once(&archive, &target)?;
        Ok(target)
    }

    /// A wheel named in py_modules, as a file pip can install (keeping its name, which pip reads).
    fn wheel(&self, uri: &str) -> Result<PathBuf, String> {
        if Path::new(uri).is_absolute() {
            return if Path::new(uri).is_file() {
                Ok(PathBuf::from(uri))
            } else {
                Err(format!("py_modules wheel {uri:?} is not a file on the head"))
            };
        }
        let stored = if uri.starts_with("s3://") { self.fetch_s3(uri, "py_module")? } else { self.uploaded(uri)? };
        let dir = self.resources_dir("wheels")?.join(short_hash(&[&stored.display().to_string()]));
        let wheel = dir.join(base_name(uri));
        if !wheel.is_file() {
            create_dir(&dir)?;
            std::fs::copy(&stored, &wheel).map_err(|e| format!("cannot stage wheel {uri}: {e}"))?;
        }
        Ok(wheel)
    }

    /// Downloads an `s3://` archive once per version (its ETag) into the packages directory.
    #[tracing::instrument(skip(self))]
    fn fetch_s3(&self, uri: &str, what: &str) -> Result<PathBuf, String> {
        let name = base_name(uri);
        if !(name.ends_with(".zip") || name.ends_with(".whl")) {
            return Err(format!("{what} {uri:?}: remote archives must be .zip files (or .whl wheels in py_modules)"));
        }
        let handle = tokio::runtime::Handle::current();
        handle.block_on(async {
            use object_store::ObjectStoreExt;
            let (store, key) = oxray_io::object_store_for_uri(uri).map_err(|e| format!("{what} {uri:?}: {e}"))?;
            let path = object_store::path::Path::from(key);
            let meta = store.head(&path).await.map_err(|e| format!("cannot read {what} {uri:?}: {e}"))?;
            if meta.size > MAX_REMOTE_ARCHIVE_BYTES {
                return Err(format!(
                    "{what} {uri:?} is {} bytes, over the {} MiB limit",
                    meta.size,
                    MAX_REMOTE_ARCHIVE_BYTES >> 20
                ));
            }
            let version = meta.e_tag.clone().unwrap_or_else(|| meta.last_modified.to_rfc3339());
            let dir = self.packages_dir.join(format!("s3_{}", short_hash(&[uri, &version])));
            let file = dir.join(name);
            if file.is_file() {
                return Ok(file);
            }
            let data = store.get(&path).await.map_err(|e| format!("cannot read {what} {uri:?}: {e}"))?;
            let bytes = data.bytes().await.map_err(|e| format!("cannot read {what} {uri:?}: {e}"))?;
            packages::check_zip(&bytes).map_err(|e| format!("{what} {uri:?}: {e}"))?;
            create_dir(&dir)?;
            let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
            oxray_object_store::write_private_file(&tmp, &bytes).map_err(|e| format!("cannot store {uri}: {e}"))?;
            std::fs::rename(&tmp, &file).map_err(|e| format!("cannot store {uri}: {e}"))?;
            Ok(file)
        })
    }

    /// `pip` as Ray takes it: a list of requirements, a requirements file on
    /// the head, or `{"packages": ..., "pip_check": bool, "pip_install_options": [...]}`.
    fn pip_spec(&self, spec: &Value) -> Result<(Vec<String>, Vec<String>, bool), String> {
        let lines = |packages: &Value| -> Result<Vec<String>, String> {
            match packages {
                Value::Array(items) => Ok(items.iter().filter_map(Value::as_str).map(str::to_string).collect()),
                Value::String(file) => std::fs::read_to_string(file)
                    .map(|text| text.lines().map(str::to_string).collect())
                    .map_err(|e| format!("cannot read the pip requirements file {file:?} on the head: {e}")),
                other => Err(format!("runtime_env[\"pip\"] packages must be a list or a file, got {other}")),
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
    fn virtualenv(&self, requirements: &[String], options: &[String], check: bool) -> Result<PathBuf, String> {
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
                std::fs::rename(&building, &venv)
                    .map_err(|e| format!("cannot move {} to {}: {e}", building.display(), venv.display()))
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
    ) -> Result<(), String> {
        let mut log = self.log;
        let _ = writeln!(log, "oxray: creating a virtualenv with {requirements:?} in {}", venv.display());
        self.run(Command::new(self.python).args(["-m", "venv", "--without-pip"]).arg(venv), "python -m venv")?;
        // The cluster's packages stay importable (and count as installed for pip) behind the venv's own.
        let cluster_paths = Command::new(self.python)
            .args(["-c", "import site, sysconfig; print('\\n'.join(dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']])))"])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.python))?;
        let site = site_packages(venv)?;
        // `addsitedir` rather than bare paths, so the cluster's own `.pth` files (editable installs) apply too.
        let pth: String = String::from_utf8_lossy(&cluster_paths.stdout)
            .lines()
            .filter(|line| !line.is_empty())
            .map(|dir| format!("import site; site.addsitedir({})\n", Value::String(dir.to_string())))
            .collect();
        std::fs::write(site.join("_oxray_cluster.pth"), pth)
            .map_err(|e| format!("cannot write {}: {e}", site.display()))?;
        let requirements_file = venv.join("requirements.txt");
        std::fs::write(&requirements_file, requirements.join("\n") + "\n")
            .map_err(|e| format!("cannot write {}: {e}", requirements_file.display()))?;
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
        File::create(venv.join(READY_MARKER)).map_err(|e| format!("cannot mark {} ready: {e}", venv.display()))?;
        Ok(())
    }

    /// Runs a setup command with its output in the job's log; `Err` quotes its last lines. It
    /// leads a process group of its own, which is killed when the job is stopped or the setup's
    /// deadline passes, and dies with this thread (`PR_SET_PDEATHSIG`) should the server die.
    fn run(&self, command: &mut Command, what: &str) -> Result<(), String> {
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
        let mut child = command.spawn().map_err(|e| format!("{what} could not start ({}): {e}", self.python))?;
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
                Err(e) => return Err(format!("{what}: cannot wait for it: {e}")),
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
        Err(format!("{what} failed ({status}):\n{tail}"))
    }
}

/// The file a virtualenv's build writes last: a venv without it is not used.
const READY_MARKER: &str = ".oxray-ready";

/// A script in `bin/` larger than this is not one pip or venv wrote.
const MAX_SCRIPT_BYTES: u64 = 1 << 20;

/// Rewrites the scripts of the venv built at `built` (its console scripts' shebangs, the
/// `activate` scripts, `pyvenv.cfg`) to name `target`, where it is about to be renamed to:
/// venv and pip write the absolute path they built at.
fn point_scripts_at(built: &Path, target: &Path) -> Result<(), String> {
    let (from, to) = (built.as_os_str().as_encoded_bytes(), target.as_os_str().as_encoded_bytes());
    let bin = built.join("bin");
    let entries = std::fs::read_dir(&bin).map_err(|e| format!("cannot read {}: {e}", bin.display()))?;
    let files = entries.filter_map(Result::ok).map(|e| e.path()).chain([built.join("pyvenv.cfg")]);
    for path in files {
        // `bin/python` and its kin are links to the interpreter: left alone.
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !meta.is_file() || meta.len() > MAX_SCRIPT_BYTES {
            continue;
        }
        let text = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
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
        std::fs::write(&path, rewritten).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `lib/pythonX.Y/site-packages` of a virtualenv.
fn site_packages(venv: &Path) -> Result<PathBuf, String> {
    let lib = venv.join("lib");
    let entries = std::fs::read_dir(&lib).map_err(|e| format!("cannot read {}: {e}", lib.display()))?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.is_dir())
        .ok_or_else(|| format!("the virtualenv {} has no site-packages", venv.display()))
}

/// Where `archive` is unpacked under `root`: named by its content's SHA-256 (as Ray names
/// packages by hash), after its file name for people reading the directory. A new version of an
/// archive, or another bucket's archive of the same name, is unpacked apart; the same content is
/// unpacked once.
fn unpacked_dir(root: &Path, archive: &Path) -> Result<PathBuf, String> {
    use sha2::Digest;
    use std::io::Read;
    let mut file = File::open(archive).map_err(|e| format!("cannot read {}: {e}", archive.display()))?;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(|e| format!("cannot read {}: {e}", archive.display()))?;
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
fn unpack_once(archive: &Path, target: &Path) -> Result<(), String> {
    if target.is_dir() {
        return Ok(());
    }
    packages::unpack_zip(archive, target)
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
    fn acquire(path: &Path, control: &SetupControl) -> Result<Self, String> {
        use std::os::fd::AsRawFd;
        let file = oxray_object_store::private_file_options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        loop {
            // SAFETY: flock on a descriptor this struct owns; LOCK_NB returns at once.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Self(file));
            }
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(format!("cannot lock {}: {error}", path.display()));
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

//! The seed stack under test in `seed-stack`: seed 002's Flask worker (`bench/seed_stack/app.py`,
//! our own code written to the seeds' documented behaviour) on gunicorn, `gthread` workers, on a
//! free loopback port, reading its cached tokens from the bench's `redis-server`.
//!
//! Owns finding a Python that has Flask, gunicorn and redis, starting gunicorn in a process group
//! of its own, waiting until every worker is up, the group's CPU time, and killing the whole
//! group (master and workers) when dropped, also when the run fails or is interrupted. Does not
//! generate load.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::BenchError;
use super::conn::{self, RawConn};
use super::rig;

/// How gunicorn runs the app (the scenario's figures are for this shape).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Worker processes (`--workers`).
    pub workers: u32,
    /// Threads per worker (`--threads`, with `--worker-class gthread`).
    pub threads: u32,
    /// The app's `MAX_CONCURRENT`, per worker process.
    pub max_concurrent: u32,
}

/// The folder of `app.py`, checked, made absolute (gunicorn `--chdir`s into it).
pub fn app_dir(dir: &Path) -> Result<PathBuf, BenchError> {
    if !dir.join("app.py").is_file() {
        return Err(BenchError::Setup(format!(
            "no app.py in {}: run from the repository root or pass --seed-stack-dir",
            dir.display()
        )));
    }
    Ok(std::path::absolute(dir)?)
}

/// Checks that `python` imports what the seed stack needs; the error is one line naming the fix.
pub async fn check_python(python: &Path, dir: &Path) -> Result<(), BenchError> {
    let fix = format!(
        "pip install -r {} (or pass --python)",
        dir.join("requirements.txt").display()
    );
    let out = Command::new(python)
        .args(["-c", "import flask, gunicorn, redis"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await;
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => {
            // Python's last line says which module is missing.
            let stderr = String::from_utf8_lossy(&o.stderr);
            let why = match stderr.lines().last().map(str::trim) {
                Some(line) if !line.is_empty() => format!(" ({line})"),
                _ => String::new(),
            };
            Err(BenchError::Setup(format!(
                "{} cannot import flask, gunicorn and redis{why}: {fix}",
                python.display()
            )))
        }
        Err(e) => Err(BenchError::Setup(format!(
            "cannot run {} ({e}): {fix}",
            python.display()
        ))),
    }
}

/// gunicorn serving the seed stack; `addr` is its `host:port`. Its process group is killed when
/// this is dropped.
pub struct SeedStack {
    pub addr: String,
    child: Child,
    /// The group gunicorn leads: the master and every worker it forks.
    pgid: u32,
}

impl SeedStack {
    /// Starts gunicorn with `python` on a free loopback port (retrying when another process takes
    /// the port first) and returns once `/health` answers and all `shape.workers` workers run.
    pub async fn start(
        python: &Path,
        dir: &Path,
        redis_port: u16,
        shape: Shape,
    ) -> Result<SeedStack, BenchError> {
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let addr = format!("127.0.0.1:{port}");
            let child = Command::new(python)
                .args(["-m", "gunicorn", "--chdir"])
                .arg(dir)
                .args(["--worker-class", "gthread"])
                .args(["--workers", &shape.workers.to_string()])
                .args(["--threads", &shape.threads.to_string()])
                .args(["--bind", &addr, "--log-level", "warning", "app:app"])
                .env("REDIS_HOST", "127.0.0.1")
                .env("REDIS_PORT", redis_port.to_string())
                .env("MAX_CONCURRENT", shape.max_concurrent.to_string())
                // No __pycache__ left in the source tree.
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                // A group of its own, so the workers can be killed with the master, and a
                // terminal's Ctrl-C reaches only the bench, which then drops this.
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| BenchError::Setup(format!("gunicorn: {e}")))?;
            let pgid = child
                .id()
                .ok_or_else(|| BenchError::Setup("gunicorn exited at once".into()))?;
            let mut stack = SeedStack { addr, child, pgid };
            if stack.ready(shape.workers).await? {
                return Ok(stack);
            }
            // Dropping it kills what started; a port taken by another process makes gunicorn
            // give up binding after a few seconds, then we try another.
        }
        Err(BenchError::Setup(
            "gunicorn would not start (its errors are above)".into(),
        ))
    }

    /// Waits until `/health` answers 200 and the group holds the master and `workers` workers;
    /// `false` when gunicorn exited first.
    async fn ready(&mut self, workers: u32) -> Result<bool, BenchError> {
        let health = conn::get(&self.addr, "/health");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return Ok(false);
            }
            // The master listens before a worker is up to answer: bound each try.
            let answered = tokio::time::timeout(Duration::from_secs(1), async {
                let mut c = RawConn::connect(&self.addr).await?;
                c.send(&health).await.map(|(status, _)| status == 200)
            })
            .await;
            if matches!(answered, Ok(Ok(true))) && self.processes().len() > workers as usize {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(BenchError::Setup(format!(
            "gunicorn did not answer /health on {} with {workers} workers within 30 s",
            self.addr
        )))
    }

    /// The live processes of gunicorn's group (master and workers).
    pub fn processes(&self) -> Vec<u32> {
        rig::group_members(self.pgid)
    }

    /// CPU seconds used so far by the group's live processes (master and workers).
    pub fn cpu_seconds(&self) -> f64 {
        rig::group_cpu_seconds(self.pgid)
    }
}

impl Drop for SeedStack {
    fn drop(&mut self) {
        // The whole group: killing only the master would leave its workers serving.
        let killed = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.pgid)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !killed {
            let _ = self.child.start_kill();
        }
    }
}

//! The balancing clients (client/ in Rust, clients/python/) against three live gateway
//! processes on one Redis and one simulator, one of which is killed and restarted on its port:
//! every call succeeds, the dead one is ejected and let back (as the client's own counts say),
//! and no call is solved twice (upstream submits at the simulator = calls).

mod keyed;
mod python;
mod rust;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use captcha_gateway::sim::LatencyRange;
use tokio::process::Child;

use crate::support::KEY;
use crate::support::fleet::{SimServer, spawn_serve};
use crate::support::redis::free_port;

/// One gateway process on a fixed loopback port, so it can come back where its clients expect it.
pub(crate) struct Instance {
    child: Option<Child>,
    pub base: String,
    config: tempfile::NamedTempFile,
}

impl Instance {
    pub async fn start(sim: &SimServer, redis_url: &str) -> Instance {
        Self::start_with(sim, redis_url, 2000, "").await
    }

    /// With its own `max_concurrent` and TOML tables appended (`[[tenants]]`), no slow start.
    pub async fn start_with(
        sim: &SimServer,
        redis_url: &str,
        max_concurrent: u32,
        tables: &str,
    ) -> Instance {
        Self::start_warming_up(sim, redis_url, max_concurrent, 0.0, tables).await
    }

    /// [`start_with`](Self::start_with) with slow start over `warmup_s` after each (re)start.
    pub async fn start_warming_up(
        sim: &SimServer,
        redis_url: &str,
        max_concurrent: u32,
        warmup_s: f64,
        tables: &str,
    ) -> Instance {
        let mut config = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            config,
            "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nlisten = \"127.0.0.1:{}\"\n\
             threads = 2000\nmax_concurrent = {max_concurrent}\nwarmup_s = {warmup_s}\nredis_url = \"{redis_url}\"\n\
             [poll]\nfirst_check_s = 0.05\ninterval_s = 0.05\nmax_requests_per_second = 2000\n{tables}",
            sim.addr,
            free_port()
        )
        .unwrap();
        let mut instance = Instance {
            child: None,
            base: String::new(),
            config,
        };
        instance.spawn().await;
        instance
    }

    async fn spawn(&mut self) {
        let env = [("CAPTCHAAI_API_KEY", KEY), ("RUST_LOG", "warn")];
        let (child, base, _) = spawn_serve(self.config.path(), &env, Stdio::inherit()).await;
        if !self.base.is_empty() {
            assert_eq!(base, self.base, "restarted on the same address");
        }
        self.child = Some(child);
        self.base = base;
    }

    /// `kill -9`: connections reset, the port refuses.
    pub async fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().await.unwrap();
    }

    /// Sends `signal` (`STOP`, `CONT`) with the shell's builtin `kill`.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().and_then(Child::id).expect("running");
        let sent = std::process::Command::new("sh")
            .args(["-c", &format!("kill -{signal} {pid}")])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Starts it again on the same port; returns once it listens.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "killed first");
        self.spawn().await;
    }
}

/// A simulator whose solves take 50-100 ms: calls are quick, and several overlap.
pub(crate) async fn simulator() -> SimServer {
    SimServer::start(
        LatencyRange {
            min: Duration::from_millis(50),
            max: Duration::from_millis(100),
        },
        5000,
    )
    .await
}

//! The balancing clients (client/ in Rust, clients/python/) against three live gateway
//! processes on one Redis and one simulator, one of which is killed and restarted on its port:
//! every call succeeds, the dead one is ejected and let back (as the client's own counts say),
//! and no call is solved twice (upstream submits at the simulator = calls).

mod keyed;
mod mid_call;
mod mid_call_windows;
mod python;
mod rust;

use std::time::Duration;

use captcha_gateway::sim::LatencyRange;

use crate::support::KEY;
use crate::support::fleet::SimServer;
use crate::support::gateway::{GatewayProcess, Launch};
use crate::support::redis::free_port;

/// One gateway process on a fixed loopback port, so it can come back where its clients expect it.
pub(crate) struct Instance {
    process: Option<GatewayProcess>,
    pub base: String,
    launch: Launch,
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
        let launch = Launch::serve(format!(
            "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nlisten = \"127.0.0.1:{}\"\n\
             threads = 2000\nmax_concurrent = {max_concurrent}\nwarmup_s = {warmup_s}\nredis_url = \"{redis_url}\"\n\
             [poll]\nfirst_check_s = 0.05\ninterval_s = 0.05\nmax_requests_per_second = 2000\n{tables}\n",
            sim.addr,
            free_port()
        ))
        .provider_key(KEY)
        .log("warn");
        Self::launched(launch).await
    }

    /// Configured as a user runs it against a provider: default polling, admission and lease,
    /// only the provider's address pointing at the simulator; on `redis_url`, or on its own
    /// embedded store when `None`.
    pub async fn as_users_run_it(sim: &SimServer, redis_url: Option<&str>) -> Instance {
        let store = redis_url.map_or(String::new(), |url| format!("redis_url = \"{url}\"\n"));
        let launch = Launch::serve(format!(
            "provider = \"captchaai\"\nprovider_url = \"http://{}\"\nlisten = \"127.0.0.1:{}\"\n\
             threads = 500\n{store}",
            sim.addr,
            free_port()
        ))
        .provider_key(KEY)
        .log("warn");
        Self::launched(launch).await
    }

    async fn launched(launch: Launch) -> Instance {
        let process = launch.clone().start().await;
        Instance {
            base: process.base.clone(),
            process: Some(process),
            launch,
        }
    }

    /// `kill -9`: connections reset, the port refuses.
    pub async fn kill(&mut self) {
        let mut process = self.process.take().expect("running");
        process.kill().await;
    }

    /// Sends `signal` (`STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        self.process.as_ref().expect("running").signal(signal);
    }

    /// Starts it again on the same port; returns once it listens.
    pub async fn restart(&mut self) {
        assert!(self.process.is_none(), "killed first");
        let process = self.launch.clone().start().await;
        assert_eq!(process.base, self.base, "restarted on the same address");
        self.process = Some(process);
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

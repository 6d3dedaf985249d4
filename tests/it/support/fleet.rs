//! What a fleet of gateway processes (`gateway::GatewayProcess`) runs against on one machine:
//! a simulator served by the test process, and a client that keeps up with many callers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use captcha_gateway::model::Kind;
use captcha_gateway::sim::{Clock, LatencyRange, SimSettings, Simulator};

/// A simulator served on a loopback port by this test process.
pub struct SimServer {
    pub sim: Arc<Simulator>,
    pub addr: SocketAddr,
}

impl SimServer {
    pub async fn start(latency: LatencyRange, threads: u32) -> SimServer {
        Self::with_settings(
            SimSettings {
                threads,
                ..SimSettings::default()
            },
            latency,
        )
        .await
    }

    /// A simulator with `settings`, every kind solving within `latency`.
    pub async fn with_settings(settings: SimSettings, latency: LatencyRange) -> SimServer {
        Self::with_clock(settings, latency, Clock::system()).await
    }

    /// A simulator with `threads` whose time stands still until the test moves it
    /// (`sim.clock().advance`): every task is ready 1 s of that time after its submit, so none
    /// ends before the test says, however slow the machine.
    pub async fn stalled(threads: u32) -> SimServer {
        let settings = SimSettings {
            threads,
            ..SimSettings::default()
        };
        let latency = LatencyRange::fixed(Duration::from_secs(1));
        Self::with_clock(
            settings,
            latency,
            Clock::manual(captcha_gateway::model::now_ms()),
        )
        .await
    }

    /// The simulator's verdict on `token` (`/verify`: valid, already used, expired or unknown).
    pub async fn verify(&self, http: &reqwest::Client, token: &str) -> serde_json::Value {
        super::verify_at(http, &format!("http://{}", self.addr), token).await
    }

    /// [`with_settings`](Self::with_settings) reading `clock`: on a [`Clock::manual`] no task is
    /// ready until the test moves it past the task's latency.
    pub async fn with_clock(
        mut settings: SimSettings,
        latency: LatencyRange,
        clock: Clock,
    ) -> SimServer {
        for kind in Kind::ALL {
            settings.latency.insert(kind, latency);
        }
        let sim = Simulator::with_clock(settings, clock);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(captcha_gateway::sim::serve(
            sim.clone(),
            listener,
            std::future::pending(),
        ));
        SimServer { sim, addr }
    }
}

/// An HTTP client that keeps up with a thousand concurrent callers.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(2000)
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

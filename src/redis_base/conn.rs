//! Connections to one Redis or a Redis Cluster behind one type, with explicit timeouts
//! (docs/REDIS.md, "When Redis goes away"): a reconnecting connection for ordinary commands, and a
//! separate one for blocking reads whose response timeout exceeds the block time (redis-rs
//! defaults to 500 ms, which would break `BLPOP`).

use std::time::Duration;

use crate::secret::redact_url;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, TlsCertificates, Value};

/// Where Redis is and how patient to be with it.
#[derive(Clone)]
pub struct RedisTarget {
    /// One URL for a single server; several (any of the masters) for a Cluster.
    pub urls: Vec<String>,
    pub cluster: bool,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// PEM certificates that `rediss://` servers may chain to, for a private CA; `None` trusts
    /// the system's roots.
    pub ca_pem: Option<Vec<u8>>,
}

/// The URLs may carry a password: `Debug` shows them redacted.
impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact_url(u)).collect();
        f.debug_struct("RedisTarget")
            .field("urls", &urls)
            .field("cluster", &self.cluster)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("private_ca", &self.ca_pem.is_some())
            .finish()
    }
}

impl RedisTarget {
    /// A client of the single server (for a Pub/Sub connection); `None` for a Cluster.
    pub fn single_client(&self) -> Option<RedisResult<redis::Client>> {
        if self.cluster {
            return None;
        }
        let url = self.urls.first().cloned().unwrap_or_default();
        Some(match self.certificates() {
            Some(certs) => redis::Client::build_with_tls(url, certs),
            None => redis::Client::open(url),
        })
    }

    /// A client of one server for Pub/Sub: the single server, or the first Cluster node (a
    /// Cluster forwards every `PUBLISH` to all its nodes, so any one hears every message).
    pub fn pubsub_client(&self) -> RedisResult<redis::Client> {
        let url = self.urls.first().cloned().unwrap_or_default();
        match self.certificates() {
            Some(certs) => redis::Client::build_with_tls(url, certs),
            None => redis::Client::open(url),
        }
    }

    fn certificates(&self) -> Option<TlsCertificates> {
        self.ca_pem.as_ref().map(|pem| TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        })
    }
}

/// A cheap-to-clone handle that reconnects by itself. It does not replay a command that was in
/// flight when the connection dropped: callers decide what is safe to retry.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connects for ordinary commands. A single server is connected lazily, so the gateway starts
    /// (degraded) while Redis is down; a Cluster needs its nodes reachable to learn the slots.
    pub async fn open(target: &RedisTarget, response_timeout: Duration) -> RedisResult<Conn> {
        if target.cluster {
            let mut builder = ClusterClientBuilder::new(target.urls.clone())
                .connection_timeout(target.connect_timeout)
                .response_timeout(response_timeout);
            if let Some(certs) = target.certificates() {
                builder = builder.certs(certs);
            }
            let client = builder.build()?;
            return Ok(Conn::Cluster(client.get_async_connection().await?));
        }
        let url = target.urls.first().cloned().unwrap_or_default();
        let client = match target.certificates() {
            Some(certs) => redis::Client::build_with_tls(url, certs)?,
            None => redis::Client::open(url)?,
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(target.connect_timeout))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        Ok(Conn::Single(ConnectionManager::new_lazy_with_config(
            client, config,
        )?))
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

//! Real `redis-server` processes on free loopback ports, one per test, killed on drop. Also a
//! three-master Redis Cluster made with `redis-cli --cluster create`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (the race with another process taking it is handled by retrying).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct RedisServer {
    /// The server binary: `redis-server`, or [`valkey_server`] where a test needs what Redis 7.0
    /// lacks.
    program: PathBuf,
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    env: Vec<(String, String)>,
}

fn ping(port: u16) -> bool {
    Command::new("redis-cli")
        .args(["-p", &port.to_string(), "ping"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
        .unwrap_or(false)
}

/// Waits for `ready`, failing at once if the process died. Process start-up has no event to
/// wait on, so this polls; it is not a timing assertion (the bound only ends a hung start).
fn wait_until(mut child: Option<&mut Child>, ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Some(c) = child.as_mut() {
            if matches!(c.try_wait(), Ok(Some(_))) {
                return false;
            }
        }
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_with_env(extra, Vec::new())
    }

    /// Starts a server with extra arguments and environment (e.g. a preloaded library).
    pub fn start_with_env(extra: &[&str], env: Vec<(String, String)>) -> Self {
        Self::start_program("redis-server".into(), extra, env)
    }

    /// Starts `program` (a `redis-server` or a server that speaks its protocol and options).
    pub fn start_program(program: PathBuf, extra: &[&str], env: Vec<(String, String)>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut server = RedisServer {
            program,
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env,
        };
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "{} would not start; log:\n{}",
            server.program.display(),
            server.log()
        );
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("redis-{}.log", self.port))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn spawn(&mut self) -> bool {
        let mut child = Command::new(&self.program)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{} does not run ({e}); scripts/test installs it",
                    self.program.display()
                )
            });
        let port = self.port;
        let up = wait_until(Some(&mut child), || ping(port));
        if !up {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        self.child = Some(child);
        true
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Provider tasks noted for adoption across every target (docs/REDIS.md "Provider tasks a
    /// stopped instance submitted"): a test kills an instance only once its work is noted, as a
    /// kill between the provider's reply and the note leaves nothing to adopt.
    pub async fn noted_provider_tasks(&self) -> usize {
        let client = redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("cg:{t:*}:notes")
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut n = 0;
        for key in keys {
            let len: usize = redis::cmd("HLEN")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            n += len;
        }
        n
    }

    /// Kills the server (SIGKILL): an outage.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `SIGSTOP`: the process holds its connections but answers nothing (a frozen VM, a long
    /// fork or swap storm), unlike [`kill`](Self::kill), whose peers see the connection close.
    pub fn pause(&self) {
        signal(self.pid().expect("a running redis-server"), "STOP");
    }

    /// `SIGCONT` after [`pause`](Self::pause): the server answers what queued up meanwhile.
    pub fn resume(&self) {
        signal(self.pid().expect("a running redis-server"), "CONT");
    }

    /// Starts it again on the same port: empty (as after a crash without persistence: the
    /// server runs with `--save ""` and `--appendonly no`, so nothing is reloaded), or from its
    /// append-only file when started with `--appendonly yes`.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not come back on port {}:\n{}",
            self.port,
            self.log()
        );
    }
}

/// Valkey 8's server, unpacked under `target/` by scripts/test from Debian's bookworm-backports:
/// it speaks `WAITAOF` (it reports itself as Redis 7.2.4), which the Debian Redis 7.0 here
/// lacks.
pub fn valkey_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/valkey/usr/bin/valkey-server")
}

/// Sends `SIG<name>` to `pid` with kill(1): the crate forbids `unsafe`, so no libc call.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill(1) runs");
    assert!(status.success(), "kill -{name} {pid} failed");
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster: three masters, optionally one replica each (test-only topologies).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

/// `redis-cli -p <port> <args>`'s output, empty when the node does not answer.
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

impl RedisCluster {
    /// Three masters, no replicas: the smallest real Cluster.
    pub fn start() -> Self {
        Self::start_with_replicas(0)
    }

    /// Three masters with `replicas` replicas each (`redis-cli --cluster create` needs
    /// `3 x (1 + replicas)` nodes). A two-second node timeout lets a replica take over from a
    /// dead master within seconds; replicas sync at once (no diskless-sync delay) and stand for
    /// election however stale (validity factor 0), so a failover never waits on the test's pace.
    pub fn start_with_replicas(replicas: usize) -> Self {
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| {
                RedisServer::start_with(&[
                    // Tests make a replica fall behind with DEBUG SLEEP.
                    "--enable-debug-command",
                    "local",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "2000",
                    "--repl-diskless-sync-delay",
                    "0",
                    "--cluster-replica-validity-factor",
                    "0",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "cluster create failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        let ok = wait_until(None, || cluster.settled(None));
        assert!(ok, "cluster never settled:\n{}", cluster.nodes_text());
        cluster
    }

    /// Node URLs, comma-separated, as `--redis-url` takes them.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `CLUSTER NODES` as a live node sees it.
    pub fn nodes_text(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| cli(n.port, &["cluster", "nodes"]))
            .find(|t| !t.trim().is_empty())
            .unwrap_or_default()
    }

    /// Ports of the nodes that are masters now (and not failed).
    pub fn master_ports(&self) -> Vec<u16> {
        self.nodes_text()
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let flags = *fields.get(2)?;
                let live_master = flags.contains("master") && !flags.contains("fail");
                let port = fields.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                live_master.then_some(port)
            })
            .collect()
    }

    /// Every live node says `cluster_state:ok`, every slot is served, and (when `dead` is given)
    /// the nodes agree that `dead` failed and is no longer a master.
    fn settled(&self, dead: Option<u16>) -> bool {
        let live: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect();
        let all_ok = live.iter().all(|p| {
            let info = cli(*p, &["cluster", "info"]);
            info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
        });
        // A replica that never finished its first sync cannot take over.
        let replicas_synced = || {
            live.iter().all(|p| {
                let info = cli(*p, &["info", "replication"]);
                !info.contains("role:slave") || info.contains("master_link_status:up")
            })
        };
        all_ok
            && (dead.is_some() || replicas_synced())
            && dead.is_none_or(|d| {
                live.iter().all(|p| {
                    cli(*p, &["cluster", "nodes"]).lines().any(|l| {
                        l.contains(&format!(":{d}@")) && l.contains("fail") && !l.contains("fail?")
                    })
                }) && !self.master_ports().contains(&d)
            })
    }

    /// `SIGSTOP` of the node on `port`: it reads nothing more until killed or resumed.
    pub fn pause_node(&self, port: u16) {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
            .pause();
    }

    /// `kill -9` of the node on `port`.
    pub fn kill_node(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster");
        node.kill();
    }

    /// The port of the replica of the master on `port`.
    pub fn replica_of(&self, port: u16) -> Option<u16> {
        let text = self.nodes_text();
        let master_id = text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1)?
                .contains(&format!(":{port}@"))
                .then(|| f[0].to_owned())
        })?;
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(3)? == &master_id).then_some(())?;
            f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()
        })
    }

    /// A replica has taken over from the dead master on `port` and every slot is served again
    /// (poll it with `eventually`).
    pub fn failed_over(&self, port: u16) -> bool {
        self.settled(Some(port))
    }
}

/// Bytes clients other than Redis itself sent to the server on `port` that it has not read yet
/// (the receive queues of its connections, as `ss` shows them): commands in flight to a paused
/// server. A replica's link is left out: it acknowledges its offset every second, so its bytes
/// pile up on a paused master whether or not any client command is waiting.
pub fn unread_bytes(port: u16) -> u64 {
    let ss = |filter: String, processes: bool| {
        let mut args = vec![if processes { "-tnpH" } else { "-tnH" }];
        args.extend(["state", "established"]);
        let out = Command::new("ss")
            .args(&args)
            .arg(filter)
            .output()
            .expect("ss (iproute2) runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Each line: receive queue, send queue, local address, peer address[, its process].
    let port_of = |addr: &str| addr.rsplit(':').next().map(str::to_owned);
    let from_redis: Vec<String> = ss(format!("( dport = :{port} )"), true)
        .lines()
        .filter(|l| l.contains("((\"redis-server\""))
        .filter_map(|l| port_of(l.split_whitespace().nth(2)?))
        .collect();
    ss(format!("( sport = :{port} )"), false)
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let peer = port_of(fields.get(3)?)?;
            (!from_redis.contains(&peer)).then(|| fields.first()?.parse::<u64>().ok())?
        })
        .sum()
}

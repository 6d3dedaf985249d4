//! The floor `hit` is compared with: `redis-benchmark` running an equivalent Lua pop (drop
//! stale members, take the earliest-expiring one, count the hit) against the same
//! `redis-server`, in the same run, on members the size of a pooled answer's JSON.

use super::BenchError;
use super::report::RunResult;

/// The pop `redis-benchmark` runs: drop what is too old, take the earliest-expiring member,
/// count the hit. Our `arrive.lua` does this plus the lease reaping of waiters and claims.
pub const POP_LUA: &str = "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1]) \
local top = redis.call('ZRANGE', KEYS[1], 0, 0)[1] \
if top then redis.call('ZREM', KEYS[1], top) redis.call('HINCRBY', KEYS[2], 'pool_hits', 1) end \
return top";

/// `redis-benchmark` running [`POP_LUA`] against the same server on a set of members like our
/// pooled answers; `None` (and a note) when `redis-benchmark` is not installed.
pub async fn redis_benchmark(
    url: &str,
    quick: bool,
    result: &mut RunResult,
) -> Result<Option<f64>, BenchError> {
    let n: u64 = if quick { 20_000 } else { 300_000 };
    let parsed = url::Url::parse(url).map_err(|e| BenchError::Setup(format!("{url}: {e}")))?;
    let host = parsed.host_str().unwrap_or("127.0.0.1").to_owned();
    let port = parsed.port().unwrap_or(6379).to_string();
    let key = format!("bench:{{pop-{}}}", rand::random::<u32>());
    let stats = format!("{key}:stats");
    let client = redis::Client::open(url)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    // Members the size of a pooled answer's JSON, scored far in the future (never stale).
    let fill = "for i = 1, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1], ARGV[2] + i, ARGV[3] .. i) end return 1";
    let member = format!(
        "{{\"text\":\"SIM-rc2-{}-{}\",\"solved_at\":0,\"expires_at\":0,\"user_agent\":null,\"upstream\":null,\"n\":",
        "0".repeat(13),
        "f".repeat(80)
    );
    // In slices: one long script would outlast the client's response timeout.
    let fill = redis::Script::new(fill);
    for slice in 0..n.div_ceil(10_000) {
        let _: i64 = fill
            .key(&key)
            .arg(10_000)
            .arg(4_000_000_000_000u64 + slice * 10_000)
            .arg(format!("{member}{slice}-"))
            .invoke_async(&mut con)
            .await?;
    }
    let out = tokio::process::Command::new("redis-benchmark")
        .args(["-h", &host, "-p", &port, "-c", "50", "-n"])
        .arg((n * 9 / 10).to_string())
        .args(["--csv", "EVAL", POP_LUA, "2", &key, &stats, "1"])
        .output()
        .await;
    let _: i64 = redis::cmd("DEL")
        .arg(&key)
        .arg(&stats)
        .query_async(&mut con)
        .await?;
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            result.notes.push(format!(
                "redis-benchmark failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            return Ok(None);
        }
        Err(e) => {
            result.notes.push(format!(
                "redis-benchmark is not installed ({e}); Debian's redis-tools ships it"
            ));
            return Ok(None);
        }
    };
    // CSV: a header line, then `"EVAL ...","<requests per second>",...`.
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .filter(|l| l.starts_with("\"EVAL"))
        .find_map(|l| l.split("\",\"").nth(1))
        .and_then(|f| f.trim_matches('"').parse::<f64>().ok());
    if rps.is_none() {
        result
            .notes
            .push(format!("redis-benchmark output not understood: {text}"));
    }
    Ok(rps)
}

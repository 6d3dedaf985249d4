//! The fleet's figures in Redis: each instance writes its own under a key that expires after a
//! few intervals, and lists itself in a sorted set scored by that expiry; every reader drops
//! the expired members first. A dead instance so vanishes from the report within a few
//! intervals, and both structures stay as large as the live fleet. One hash tag keeps every key
//! in one Cluster slot, so one `MGET` reads them all.
//!
//! The demand log (`status::demand`) goes fleet-wide the same way: one hash per bucket, in which
//! each instance writes its own share of the bucket under its id at every sample (a whole value,
//! so a write repeated or lost is made good by the next), kept as long as the log keeps buckets.
//! A reader adds up every instance's share of every bucket in its window.

use std::time::Duration;

use redis::AsyncCommands;

use super::demand::Bucket;
use super::instance::InstanceFigures;
use crate::model::now_ms;
use crate::redis_base::{Conn, RedisTarget};

const INSTANCES: &str = "cg:status:{fleet}:instances";
/// At most this many instances are read; a larger fleet's report sums the first ones and says
/// how many it summed.
const MAX_INSTANCES: isize = 256;
/// A snapshot larger than this is not read (a well-formed one is a few kilobytes).
const MAX_SNAPSHOT_BYTES: usize = 64 * 1024;

fn key(instance: &str) -> String {
    format!("cg:status:{{fleet}}:i:{instance}")
}

fn demand_key(start_ms: u64) -> String {
    format!("cg:status:{{fleet}}:demand:{start_ms}")
}

/// One instance's share of one bucket is under 1.5 KB, and under 400 bytes more per account
/// (at most 64); more is not ours.
pub(super) const MAX_SHARE_BYTES: usize = 64 * 1024;

pub struct Fleet {
    conn: Conn,
    ttl: Duration,
}

impl Fleet {
    pub async fn open(target: &RedisTarget, every: Duration) -> Option<Fleet> {
        match Conn::open(target, target.response_timeout).await {
            Ok(conn) => Some(Fleet {
                conn,
                // Three missed samples and the instance is gone from the report.
                ttl: (every * 3).max(Duration::from_secs(3)),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "status: cannot open Redis; the report shows this instance only");
                None
            }
        }
    }

    /// Publishes `mine` and returns every live instance's figures (`mine` among them). Redis
    /// unreachable: an empty list, and the report shows this instance alone.
    pub async fn exchange(&self, mine: &InstanceFigures) -> Vec<InstanceFigures> {
        match self.try_exchange(mine).await {
            Ok(all) => all,
            Err(e) => {
                tracing::debug!(error = %e, "status: fleet figures unavailable");
                Vec::new()
            }
        }
    }

    async fn try_exchange(
        &self,
        mine: &InstanceFigures,
    ) -> redis::RedisResult<Vec<InstanceFigures>> {
        let mut conn = self.conn.clone();
        let now = now_ms();
        let ttl_ms = self.ttl.as_millis() as u64;
        let json = serde_json::to_string(mine).unwrap_or_default();
        let () = redis::pipe()
            .cmd("SET")
            .arg(key(&mine.instance))
            .arg(json)
            .arg("PX")
            .arg(ttl_ms)
            .ignore()
            .zadd(INSTANCES, &mine.instance, now + ttl_ms)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(INSTANCES)
            .arg("-inf")
            .arg(now)
            .ignore()
            .pexpire(INSTANCES, ttl_ms as i64)
            .ignore()
            .query_async(&mut conn)
            .await?;
        let ids: Vec<String> = conn.zrange(INSTANCES, 0, MAX_INSTANCES - 1).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| key(id)).collect();
        let values: Vec<Option<String>> =
            redis::cmd("MGET").arg(&keys).query_async(&mut conn).await?;
        Ok(values
            .into_iter()
            .flatten()
            .filter(|v| v.len() <= MAX_SNAPSHOT_BYTES)
            .filter_map(|v| serde_json::from_str(&v).ok())
            .collect())
    }

    /// Writes this instance's share of the open bucket `share`, kept for `keep`.
    pub async fn publish_demand(
        &self,
        instance: &str,
        share: &Bucket,
        keep: Duration,
    ) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let key = demand_key(share.start_ms);
        let json = serde_json::to_string(share).unwrap_or_default();
        redis::pipe()
            .hset(&key, instance, json)
            .ignore()
            .pexpire(&key, keep.as_millis() as i64)
            .ignore()
            .query_async(&mut conn)
            .await
    }

    /// The buckets starting at `starts` with every instance's share added up, oldest first;
    /// buckets nobody wrote are left out.
    pub async fn read_demand(&self, starts: &[u64]) -> redis::RedisResult<Vec<Bucket>> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        for start in starts {
            pipe.hgetall(demand_key(*start));
        }
        let shares: Vec<Vec<(String, String)>> = pipe.query_async(&mut conn).await?;
        Ok(starts
            .iter()
            .zip(shares)
            .filter_map(|(start, shares)| {
                let parsed = shares
                    .into_iter()
                    .take(MAX_INSTANCES as usize)
                    .filter(|(_, v)| v.len() <= MAX_SHARE_BYTES)
                    .filter_map(|(_, v)| serde_json::from_str::<Bucket>(&v).ok());
                Bucket::sum(*start, parsed)
            })
            .collect())
    }
}

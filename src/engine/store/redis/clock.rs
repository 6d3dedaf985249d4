//! This instance's reading of Redis's clock. Scripts count every time in Redis server time; an
//! operation states when it was issued in that time, so a retry that comes after its record may
//! have expired (this process paused, its VM was frozen) is refused by the script itself rather
//! than run afresh (`lua/lib/target.lua`).
//!
//! The reading is a `TIME` reply taken at the moment it arrived, moved on by this process's
//! monotonic clock: Redis's clock had passed that value by then, so the estimate is never ahead of
//! it (a pause the monotonic clock does not count only puts it further behind, which is the safe
//! side: an operation looks older than it is).

use std::sync::Mutex;

use redis::RedisResult;
use tokio::time::Instant;

use crate::redis_base::Conn;

#[derive(Default)]
pub(super) struct RedisClock {
    last: Mutex<Option<(u64, Instant)>>,
}

impl RedisClock {
    /// Asks Redis for its time now and keeps it.
    pub async fn sync(&self, conn: &Conn) -> RedisResult<()> {
        let mut conn = conn.clone();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await?;
        self.set(secs * 1000 + micros / 1000, Instant::now());
        Ok(())
    }

    fn set(&self, redis_ms: u64, received: Instant) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((redis_ms, received));
    }

    /// Redis's time now as far as this instance can tell, never ahead of it; `None` before the
    /// first reading.
    pub fn now(&self) -> Option<u64> {
        let (at, received) = (*self.last.lock().unwrap_or_else(|e| e.into_inner()))?;
        Some(at + received.elapsed().as_millis() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_reading_moves_on_with_the_monotonic_clock() {
        let clock = RedisClock::default();
        assert_eq!(clock.now(), None);
        clock.set(1_000_000, Instant::now());
        tokio::time::advance(std::time::Duration::from_millis(1_500)).await;
        assert_eq!(clock.now(), Some(1_001_500));
    }
}

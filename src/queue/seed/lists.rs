//! The seed mode's Redis calls: one typed method per script (`lua/seed_*.lua`), so the ARGV
//! slots are named once, here, and each reply is read strictly as its contract header says (an
//! error naming the script, never a default). Each says what a lost reply, a second run, an
//! empty restarted Redis or a paused worker does:
//! - take: a lost reply leaves the entries in this consumer's processing list; the worker then
//!   rereads the list ([`Lists::own_entries`]) and picks up what it does not hold.
//! - finish: writes the result only while this consumer still holds the entry, or when Redis
//!   lost the entry (restarted empty) and the task has no result yet; never after the entry
//!   was given to another consumer. Run twice, the second run removes at most one identical
//!   entry more and writes only for it.
//! - beat / recover: a recover checks the consumer is still silent inside the script, so a
//!   consumer that beat in between keeps its entries; run twice, it moves nothing more.
//! - sweep: idempotent; every worker runs it.

use std::time::Duration;

use redis::{RedisResult, Value};

use super::keys::SeedKeys;
use crate::lua;
use crate::redis_base::{Conn, Reply, ReplyError};

/// ARGV[1] of every script: empty, so scripts read Redis server time.
const REDIS_TIME: &str = "";

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One consumer's view of a seed-style queue.
#[derive(Clone)]
pub struct Lists {
    conn: Conn,
    keys: SeedKeys,
    consumer: String,
    processing: String,
    /// How long a consumer taken for dead is remembered as such: the results' retention.
    remember_dead: Duration,
}

/// How one finish went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// This call wrote the task's result (else it had one, or none was given).
    pub written: bool,
    /// The entry was still in this consumer's processing list (else it was recovered by
    /// another worker while this one was taken for dead).
    pub removed: bool,
}

impl Lists {
    pub fn new(conn: Conn, keys: SeedKeys, consumer: &str, remember_dead: Duration) -> Self {
        Self {
            processing: keys.processing(consumer),
            conn,
            keys,
            consumer: consumer.to_owned(),
            remember_dead,
        }
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Moves up to `most` entries into this consumer's processing list (0: only a beat and the
    /// queue length).
    pub async fn take(&self, most: usize) -> RedisResult<Vec<Vec<u8>>> {
        let mut conn = self.conn.clone();
        let reply: Value = lua::SEED_TAKE
            .key(self.keys.queue())
            .key(&self.processing)
            .key(self.keys.consumers())
            .key(self.keys.queue_length())
            .arg(REDIS_TIME)
            .arg(&self.consumer)
            .arg(most)
            .invoke_async(&mut conn)
            .await?;
        Ok(taken(reply)?)
    }

    /// Waits up to `block` for one entry, moving it into this consumer's processing list
    /// (`BLMOVE`), on `blocking`: a connection of its own whose response timeout exceeds
    /// `block`.
    pub async fn wait_take(
        &self,
        blocking: &Conn,
        block: Duration,
    ) -> RedisResult<Option<Vec<u8>>> {
        let mut conn = blocking.clone();
        redis::cmd("BLMOVE")
            .arg(self.keys.queue())
            .arg(&self.processing)
            .arg("LEFT")
            .arg("RIGHT")
            .arg(block.as_secs_f64())
            .query_async(&mut conn)
            .await
    }

    /// Every entry in this consumer's processing list.
    pub async fn own_entries(&self) -> RedisResult<Vec<Vec<u8>>> {
        let mut conn = self.conn.clone();
        redis::cmd("LRANGE")
            .arg(&self.processing)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
    }

    /// Ends `entry`: removes it from this consumer's list and, if it was still there, writes
    /// `result` for task `id`, replacing any earlier one (an id pushed again is a new task). If
    /// it was not there, the result is written only when this consumer was never taken for dead
    /// and the task has none (Redis lost the entry). `None`: removes it without a result (an
    /// unreadable entry).
    pub async fn finish(
        &self,
        entry: &[u8],
        result: Option<(&str, &str)>,
    ) -> RedisResult<Finished> {
        let (id, json) = result.unwrap_or(("", ""));
        let mut conn = self.conn.clone();
        let reply: Value = lua::SEED_FINISH
            .key(self.keys.results())
            .key(self.keys.results_index())
            .key(&self.processing)
            .key(self.keys.queue())
            .key(self.keys.queue_length())
            .key(self.keys.taken_for_dead(&self.consumer))
            .arg(REDIS_TIME)
            .arg(entry)
            .arg(id)
            .arg(json)
            .invoke_async(&mut conn)
            .await?;
        Ok(finished(reply)?)
    }

    /// Beats; returns whether this consumer was still registered, and up to `most` consumers
    /// silent for `lease`.
    pub async fn beat(&self, lease: Duration, most: usize) -> RedisResult<(bool, Vec<String>)> {
        let mut conn = self.conn.clone();
        let reply: Value = lua::SEED_BEAT
            .key(self.keys.consumers())
            .arg(REDIS_TIME)
            .arg(&self.consumer)
            .arg(ms(lease))
            .arg(most)
            .invoke_async(&mut conn)
            .await?;
        Ok(beaten(reply)?)
    }

    /// Gives `consumer`'s entries back to the head of the queue and forgets it, if it has been
    /// silent for `silent`. `None`: it beat meanwhile and keeps them.
    pub async fn recover(&self, consumer: &str, silent: Duration) -> RedisResult<Option<u64>> {
        let mut conn = self.conn.clone();
        let reply: Value = lua::SEED_RECOVER
            .key(self.keys.consumers())
            .key(self.keys.processing(consumer))
            .key(self.keys.queue())
            .key(self.keys.queue_length())
            .key(self.keys.taken_for_dead(consumer))
            .arg(REDIS_TIME)
            .arg(consumer)
            .arg(ms(silent))
            .arg(ms(self.remember_dead))
            .invoke_async(&mut conn)
            .await?;
        Ok(recovered(reply)?)
    }

    /// This consumer's hand-back at a graceful exit: its unfinished entries go back to the head
    /// of the queue at once, instead of after a lease.
    pub async fn hand_back(&self) -> RedisResult<u64> {
        Ok(self
            .recover(&self.consumer, Duration::ZERO)
            .await?
            .unwrap_or(0))
    }

    /// One step of a `SCAN` for processing lists whose consumer has no beat at all: a consumer
    /// taken for dead while paused in a blocking take, whose take then moved an entry into its
    /// list, and which died before it beat again. Returns the next cursor (0: done) and the
    /// consumers found.
    pub async fn unregistered(&self, cursor: u64) -> RedisResult<(u64, Vec<String>)> {
        let mut conn = self.conn.clone();
        let prefix = self.keys.processing("");
        let pattern = format!("{}*", glob_escape(&prefix));
        let (next, lists): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        let mut found = Vec::new();
        for list in lists {
            let Some(consumer) = list.strip_prefix(&prefix) else {
                continue;
            };
            let beat: Option<f64> = redis::cmd("ZSCORE")
                .arg(self.keys.consumers())
                .arg(consumer)
                .query_async(&mut conn)
                .await?;
            if beat.is_none() {
                found.push(consumer.to_owned());
            }
        }
        Ok((next, found))
    }

    /// Removes up to `most` results finished more than `retention` ago.
    pub async fn sweep(&self, retention: Duration, most: usize) -> RedisResult<u64> {
        let mut conn = self.conn.clone();
        let reply: Value = lua::SEED_SWEEP
            .key(self.keys.results())
            .key(self.keys.results_index())
            .arg(REDIS_TIME)
            .arg(ms(retention))
            .arg(most)
            .invoke_async(&mut conn)
            .await?;
        Ok(swept(reply)?)
    }
}

/// `seed_take.lua`: the entries taken, each exactly as queued (bytes: an entry that is not
/// UTF-8 is still the worker's to count as unreadable and remove).
fn taken(reply: Value) -> Result<Vec<Vec<u8>>, ReplyError> {
    match reply {
        Value::Array(entries) => Reply::of("seed_take.lua", entries).rest_bytes("an entry"),
        // Even one entry comes as a list: a lone value is off the contract.
        _ => {
            Err(Reply::of("seed_take.lua", Vec::new())
                .wrong("the list of entries taken", "one value"))
        }
    }
}

/// `seed_finish.lua`: `{written, removed}`, each 1 or 0.
fn finished(reply: Value) -> Result<Finished, ReplyError> {
    let mut r = Reply::of_value("seed_finish.lua", reply);
    let finished = Finished {
        written: r.flag("written")?,
        removed: r.flag("removed")?,
    };
    r.end()?;
    Ok(finished)
}

/// `seed_beat.lua`: `{registered (1 or 0), {dead consumers}}`.
fn beaten(reply: Value) -> Result<(bool, Vec<String>), ReplyError> {
    let mut r = Reply::of_value("seed_beat.lua", reply);
    let beat = (r.flag("registered")?, r.list("the dead consumers")?);
    r.end()?;
    Ok(beat)
}

/// `seed_recover.lua`: how many entries were given back, or -1 when the consumer is alive.
fn recovered(reply: Value) -> Result<Option<u64>, ReplyError> {
    let mut r = Reply::of_value("seed_recover.lua", reply);
    let moved = match r.int("entries given back, or -1")? {
        -1 => None,
        n => Some(
            u64::try_from(n)
                .map_err(|_| r.wrong("entries given back, or -1", "another negative number"))?,
        ),
    };
    r.end()?;
    Ok(moved)
}

/// `seed_sweep.lua`: how many results were removed.
fn swept(reply: Value) -> Result<u64, ReplyError> {
    let mut r = Reply::of_value("seed_sweep.lua", reply);
    let removed = r.count("results removed")?;
    r.end()?;
    Ok(removed)
}

/// `text` matched literally in a `SCAN MATCH` pattern.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::BulkString(v.as_bytes().to_vec())
    }

    #[test]
    fn replies_as_their_contracts_say_read_whole() {
        let entries = taken(Value::Array(vec![s("{}"), Value::BulkString(vec![0xff])])).unwrap();
        assert_eq!(entries, [b"{}".to_vec(), vec![0xff]]);
        assert!(taken(Value::Array(vec![])).unwrap().is_empty());
        let f = finished(Value::Array(vec![Value::Int(1), Value::Int(0)])).unwrap();
        assert_eq!((f.written, f.removed), (true, false));
        let (registered, dead) = beaten(Value::Array(vec![
            Value::Int(0),
            Value::Array(vec![s("w-1")]),
        ]))
        .unwrap();
        assert_eq!((registered, dead), (false, vec!["w-1".to_owned()]));
        assert_eq!(recovered(Value::Int(3)).unwrap(), Some(3));
        assert_eq!(recovered(Value::Int(-1)).unwrap(), None);
        assert_eq!(swept(Value::Int(0)).unwrap(), 0);
    }

    #[test]
    fn a_reply_off_its_contract_is_an_error_naming_the_script() {
        let e = taken(Value::Array(vec![s("{}"), Value::Int(1)])).unwrap_err();
        assert_eq!((e.script, e.position), ("seed_take.lua", 2));
        assert!(taken(Value::Int(0)).is_err());
        assert!(taken(s("{}")).is_err(), "even one entry comes as a list");
        let e = finished(Value::Array(vec![Value::Int(1), Value::Int(2)])).unwrap_err();
        assert_eq!(e.script, "seed_finish.lua");
        assert!(
            finished(Value::Array(vec![Value::Int(1)])).is_err(),
            "two flags"
        );
        assert!(beaten(Value::Array(vec![Value::Int(1), s("w-1")])).is_err());
        assert!(
            recovered(Value::Int(-2)).is_err(),
            "-1 is the only negative"
        );
        assert!(swept(Value::Array(vec![Value::Int(1), Value::Int(1)])).is_err());
    }

    #[test]
    fn glob_characters_of_a_prefix_match_only_themselves() {
        assert_eq!(super::glob_escape("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:");
    }
}

//! Local claim batches at the script level (`hold`, `release` and the reaper in
//! `lua/lib/target.lua`, `arrive.lua`, `unhold.lua`) on a real redis-server and an explicit
//! clock: what a batch takes, what its end gives back, what a lapse does, and that no answer is
//! ever handed out twice across them. The instance's side is `engine::store::redis::held`.

use captcha_gateway::engine::store::redis::call::{Hold, Release, TargetCall};
use redis::Value;

use super::{Target, int};
use crate::support::redis::RedisServer;

const HOLD_LEASE: u64 = 3_000;

/// What the batch tests add to the script tests' target.
impl Target {
    /// Moves the target's explicit clock on by `ms`.
    fn advance(&mut self, ms: u64) {
        self.clock = self.clock.map(|c| c + ms);
    }

    /// Pools answers `T0..Tn` with `left` ms of life, plus `i` ms for `Ti`: pool order is
    /// index order.
    async fn pool(&mut self, tokens: std::ops::Range<u32>, left: i64) {
        for i in tokens {
            let call = TargetCall::Put {
                remaining_ms: left + i64::from(i),
                answer_json: format!("{{\"text\":\"T{i}\"}}"),
            };
            self.run(&format!("put{i}"), call).await;
        }
    }

    /// A pool hit ending `release` and asking for `size` more under batch `batch`. Returns the
    /// token handed out and the batch's tokens.
    async fn hit(
        &mut self,
        op: &str,
        release: Option<(&str, usize)>,
        batch: &str,
        size: u32,
    ) -> (String, Vec<String>) {
        let call = TargetCall::Arrive {
            waiter: format!("w-{op}"),
            claim: format!("c-{op}"),
            release: release.map(|(b, served)| Release {
                batch: b.into(),
                served,
            }),
            hold: (size > 0).then(|| Hold {
                batch: batch.into(),
                size,
                lease_ms: HOLD_LEASE,
            }),
        };
        let reply = self.run(op, call).await;
        assert_eq!(int(&reply[0]), 1, "{op}: a pool hit");
        let n = int(&reply[4]) as usize;
        let held = texts(&reply[5..5 + n])
            .iter()
            .map(|m| token_of(m))
            .collect();
        (token_of(&string(&reply[2])), held)
    }

    async fn unhold(&mut self, batch: &str, served: usize) -> Vec<Value> {
        let release = Release {
            batch: batch.into(),
            served,
        };
        self.run("unhold", TargetCall::Unhold(release)).await
    }

    async fn pooled(&mut self) -> Vec<String> {
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.key("pool"))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn)
            .await
            .unwrap();
        members.iter().map(|m| token_of(m)).collect()
    }

    async fn held_batches(&mut self) -> (u64, u64) {
        let batches: u64 = redis::cmd("HLEN")
            .arg(self.key("held"))
            .query_async(&mut self.conn)
            .await
            .unwrap();
        let leases: u64 = redis::cmd("ZCARD")
            .arg(self.key("holds"))
            .query_async(&mut self.conn)
            .await
            .unwrap();
        (batches, leases)
    }
}

fn string(v: &Value) -> String {
    redis::from_redis_value_ref(v).unwrap()
}

fn texts(values: &[Value]) -> Vec<String> {
    values.iter().map(string).collect()
}

/// The token of an answer's JSON, bare or in a mail (`A|<expires_at>|<json>`).
fn token_of(s: &str) -> String {
    let json = s
        .rsplit_once("|{")
        .map_or(s.to_owned(), |(_, j)| format!("{{{j}"));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["text"].as_str().unwrap().to_owned()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A batch takes only answers that keep `min_remaining` through its lease, never more than
/// half of what the pool keeps after the hit, and counts them as hits at once.
#[tokio::test]
async fn a_batch_takes_at_most_half_the_pool_and_only_answers_that_outlive_its_hold() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "batch-size").await;
    // Two answers with 11 s left (fresh now, not through a 3 s hold), eight with 60 s.
    t.pool(0..2, 11_000).await;
    t.pool(2..10, 60_000).await;
    let (served, held) = t.hit("h1", None, "b1", 8).await;
    assert_eq!(served, "T0", "the earliest expiry goes first");
    // Nine left after the hit: half is four, all from the long-lived eight.
    assert_eq!(held, ["T2", "T3", "T4", "T5"]);
    assert_eq!(sorted(t.pooled().await), ["T1", "T6", "T7", "T8", "T9"]);
    assert_eq!(t.stat("pool_hits").await, 5);
    assert_eq!(t.held_batches().await, (1, 1));
    // A pool of one gives no batch at all.
    let mut lone = Target::on(&redis, "batch-lone").await;
    lone.pool(0..2, 60_000).await;
    let (_, held) = lone.hit("h1", None, "b1", 8).await;
    assert!(held.is_empty(), "half of one answer is none");
    assert_eq!(lone.held_batches().await, (0, 0));
}

/// The end of a batch gives back exactly what its instance did not hand out, once: by the next
/// arrival or by `unhold.lua`, run twice or not.
#[tokio::test]
async fn a_batch_ended_gives_back_what_was_not_handed_out_once() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "batch-end").await;
    t.pool(0..20, 60_000).await;
    let (_, held) = t.hit("h1", None, "b1", 6).await;
    assert_eq!(held, ["T1", "T2", "T3", "T4", "T5", "T6"]);
    // The instance handed out T1 and T2; its next arrival ends b1 and takes T3 itself.
    let (served, held2) = t.hit("h2", Some(("b1", 2)), "b2", 4).await;
    assert_eq!(served, "T3", "T3..T6 went back first, in expiry order");
    assert_eq!(held2, ["T4", "T5", "T6", "T7"]);
    // b2 ended with nothing handed out, twice (a retry): its four go back once.
    t.unhold("b2", 0).await;
    t.unhold("b2", 0).await;
    let pooled = t.pooled().await;
    assert_eq!(
        pooled.len(),
        16,
        "T0..T3 handed out (T0, T3 by hits, T1, T2 from b1)"
    );
    for gone in ["T0", "T1", "T2", "T3"] {
        assert!(
            !pooled.contains(&gone.to_owned()),
            "{gone} handed out and back"
        );
    }
    // Hits: T0, T1, T2, T3; what went back no longer counts.
    assert_eq!(t.stat("pool_hits").await, 4);
    assert_eq!(t.held_batches().await, (0, 0));
}

/// An instance that never ends its batch (it died, or paused past the lease) may have handed
/// any of it out: after the lease the batch is waste, and none of it is ever pooled again.
#[tokio::test]
async fn a_batch_never_ended_is_waste_after_its_lease_and_never_handed_out_again() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "batch-lapse").await;
    t.pool(0..10, 60_000).await;
    let (_, held) = t.hit("h1", None, "b1", 4).await;
    assert_eq!(held.len(), 4);
    t.advance(HOLD_LEASE);
    let (_, _) = t.hit("h2", None, "", 0).await;
    assert_eq!(t.held_batches().await, (1, 1), "still within its lease");
    t.advance(1);
    let (served, _) = t.hit("h3", None, "", 0).await;
    assert_eq!(t.held_batches().await, (0, 0), "reaped at its lease end");
    assert_eq!(t.stat("expired_unused").await, 4);
    let mut out: Vec<String> = held;
    out.push(served);
    for token in t.pooled().await {
        assert!(!out.contains(&token), "{token} pooled again after a lapse");
    }
    // Its late release finds nothing and changes nothing.
    let before = t.pooled().await;
    t.unhold("b1", 0).await;
    assert_eq!(t.pooled().await, before);
    // Hits: h1 and its batch (5), h2, h3; the lapsed four no longer count.
    assert_eq!(t.stat("pool_hits").await, 3);
}

/// A pool hit that took a batch keeps its reply: run again after a lost reply, it returns the
/// same answer and batch and takes nothing more.
#[tokio::test]
async fn a_batch_hit_run_again_returns_the_same_batch_and_takes_nothing_more() {
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "batch-replay").await;
    t.pool(0..10, 60_000).await;
    let first = t.hit("h1", None, "b1", 4).await;
    let again = t.hit("h1", None, "b1", 4).await;
    assert_eq!(first, again);
    assert_eq!(t.pooled().await.len(), 5);
    assert_eq!(t.stat("pool_hits").await, 5);
}

/// A target whose batch is still held is not retired under its instance; once the batch
/// lapsed, retiring deletes its batch keys with the rest.
#[tokio::test]
async fn a_held_batch_keeps_its_target_until_it_lapses() {
    use captcha_gateway::engine::store::redis::call::RetireCall;
    let redis = RedisServer::start();
    let mut t = Target::on(&redis, "batch-retire").await;
    t.pool(0..3, 60_000).await;
    let (_, held) = t.hit("h1", None, "b1", 4).await;
    assert_eq!(held.len(), 1);
    let (_, _) = t.hit("h2", None, "", 0).await;
    assert!(t.pooled().await.is_empty());
    let retire = RetireCall { idle_ms: 0 };
    let kept = retire
        .invocation(t.id, &t.prelude())
        .invoke_async::<Vec<Value>>(&mut t.conn)
        .await
        .unwrap();
    assert_eq!(int(&kept[0]), 0, "kept while its batch is held");
    t.advance(HOLD_LEASE + 1);
    let gone = retire
        .invocation(t.id, &t.prelude())
        .invoke_async::<Vec<Value>>(&mut t.conn)
        .await
        .unwrap();
    assert_eq!(int(&gone[0]), 1, "retired once the batch lapsed");
    assert_eq!(t.held_batches().await, (0, 0));
}

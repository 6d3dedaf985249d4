//! Local claim batches at the `Store` seam, on a real redis-server: two instances hitting one
//! pool at once, each serving most hits from batches in memory, hand every answer out once;
//! stopping gives back what they still held, so nothing is lost; and `redis_pool_batch = 0`
//! takes every hit from Redis. The scripts' side is `scripts/held.rs`.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use captcha_gateway::engine::store::prelude::*;
use captcha_gateway::engine::store::redis::{RedisSettings, RedisStore};
use captcha_gateway::engine::store::{Arrival, WaiterId};
use captcha_gateway::model::{Answer, SolveRequest, Target, TargetPolicy, now_ms};
use tokio_util::sync::CancellationToken;

use crate::support::redis::RedisServer;

const MIN_REMAINING: u64 = 10_000;
const POOLED: usize = 600;
static NEXT: AtomicU64 = AtomicU64::new(1);

async fn store(redis: &RedisServer, batch: u32) -> Arc<RedisStore> {
    let mut settings = RedisSettings::new(vec![redis.url()], false);
    settings.pool_batch = batch;
    Arc::new(
        RedisStore::connect(settings, CancellationToken::new())
            .await
            .expect("redis store"),
    )
}

fn target() -> Target {
    let req = SolveRequest::recaptcha_v2("6Le-held", "https://held.example/login".to_owned());
    Target::of(&req, TargetPolicy::default())
}

async fn fill(store: &RedisStore, target: &Target, n: usize) {
    let now = now_ms();
    for i in 0..n {
        let answer = Answer {
            text: format!("tok-{i}"),
            user_agent: None,
            solved_at: now,
            expires_at: now + 120_000,
            upstream: None,
        };
        store.put(target, answer, now).await.unwrap();
    }
}

/// `callers` concurrent callers on `store`, each arriving until the pool is spent; returns
/// the tokens they were handed.
async fn hit_until_spent(store: Arc<RedisStore>, target: &Target, callers: usize) -> Vec<String> {
    let tasks = (0..callers).map(|_| {
        let (store, target) = (store.clone(), target.clone());
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let waiter = WaiterId::new(store.instance(), NEXT.fetch_add(1, Ordering::Relaxed));
                match store
                    .arrive(&target, &waiter, now_ms(), MIN_REMAINING)
                    .await
                {
                    Ok(Arrival::Pooled(a)) => got.push(a.text),
                    // The pool is spent: this caller would wait for a solve. Leave.
                    Ok(_) => {
                        store
                            .abandon(&target, &waiter, None, true, now_ms())
                            .await
                            .unwrap();
                        return got;
                    }
                    Err(e) => panic!("an arrival failed: {e}"),
                }
            }
        })
    });
    let mut all = Vec::new();
    for t in futures::future::join_all(tasks).await {
        all.extend(t.unwrap());
    }
    all
}

async fn pooled(redis: &RedisServer, target: &Target) -> usize {
    let n = crate::support::redis::cli(
        redis.port,
        &["ZCARD", &format!("cg:{{t:{}}}:pool", target.id)],
    );
    n.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_batching_one_pool_hand_each_answer_out_once_and_stopping_loses_none() {
    let redis = RedisServer::start();
    let (a, b) = (store(&redis, 16).await, store(&redis, 16).await);
    let t = target();
    fill(&a, &t, POOLED).await;
    let (from_a, from_b) = tokio::join!(
        hit_until_spent(a.clone(), &t, 8),
        hit_until_spent(b.clone(), &t, 8)
    );
    let handed: Vec<String> = from_a.iter().chain(&from_b).cloned().collect();
    let unique: HashSet<&String> = handed.iter().collect();
    assert_eq!(unique.len(), handed.len(), "an answer was handed out twice");
    // The pool ran dry for the script while batches may still be in hand (a batch never takes
    // the pool's last half, so arrivals kept being served until both were spent).
    assert!(
        handed.len() > POOLED / 2,
        "only {} handed out",
        handed.len()
    );
    a.hand_back().await;
    b.hand_back().await;
    // Nothing lost: each answer was handed out or is back in the pool.
    assert_eq!(handed.len() + pooled(&redis, &t).await, POOLED);
    let held =
        crate::support::redis::cli(redis.port, &["HLEN", &format!("cg:{{t:{}}}:held", t.id)]);
    assert_eq!(held.trim(), "0", "a batch left held after both stopped");
    // Stopped instances take no new batch: their hits go to Redis one by one.
    fill(&a, &t, 40).await;
    let after = hit_until_spent(a.clone(), &t, 4).await;
    assert_eq!(
        after.len() + pooled(&redis, &t).await,
        40 + POOLED - handed.len()
    );
}

#[tokio::test]
async fn batches_cut_the_redis_calls_of_a_busy_pool_and_zero_turns_them_off() {
    let redis = RedisServer::start();
    let calls = |redis: &RedisServer| -> u64 {
        let stats = crate::support::redis::cli(redis.port, &["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|l| l.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    for (batch, fewer) in [(32, true), (0, false)] {
        let s = store(&redis, batch).await;
        let t = Target::of(
            &SolveRequest::recaptcha_v2("6Le-held", format!("https://held.example/{batch}")),
            TargetPolicy::default(),
        );
        fill(&s, &t, 400).await;
        let before = calls(&redis);
        let handed = hit_until_spent(s.clone(), &t, 8).await;
        let used = calls(&redis) - before;
        assert_eq!(
            handed.iter().collect::<HashSet<_>>().len(),
            handed.len(),
            "an answer was handed out twice"
        );
        // Without batches each hit is one script call (plus the empty one that ends a caller,
        // and its abandon); with them, far fewer.
        assert_eq!(
            (used as usize) < handed.len() / 2,
            fewer,
            "{batch}: {used} script calls for {} hits",
            handed.len()
        );
    }
}

//! Local claim batches at the `Store` seam, on a real redis-server: two instances hitting one
//! pool at once, each serving most hits from batches in memory, hand every answer out once;
//! stopping gives back what they still held, so nothing is lost; and `redis_pool_batch = 0`
//! takes every hit from Redis; and a gateway process killed holding a batch loses it to waste,
//! never to a second caller. The scripts' side is `scripts/held.rs`.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use captcha_gateway::engine::store::prelude::*;
use captcha_gateway::engine::store::redis::{RedisSettings, RedisStore};
use captcha_gateway::engine::store::{Arrival, WaiterId};
use captcha_gateway::model::{Answer, SolveRequest, Target, TargetPolicy, now_ms};
use captcha_gateway::sim::LatencyRange;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::eventually::eventually;
use crate::support::fleet::{SimServer, client};
use crate::support::gateway::GatewayProcess;
use crate::support::redis::{RedisServer, cli};
use crate::support::{KEY, solve};

const MIN_REMAINING: u64 = 10_000;
const POOLED: usize = 600;
const SOON: Duration = Duration::from_secs(30);
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
    let held = cli(redis.port, &["HLEN", &format!("cg:{{t:{}}}:held", t.id)]);
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
        let stats = cli(redis.port, &["INFO", "commandstats"]);
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

/// The batches of a gateway process `kill -9`ed while its callers hit a pool: nobody else ever
/// hands those answers out (the dead instance may have), they count as waste once the lease
/// lapses, and no answer goes to two callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_holding_a_batch_loses_it_to_waste_and_hands_nothing_out_twice() {
    let redis = RedisServer::start();
    let sim = SimServer::start(LatencyRange::fixed(Duration::from_millis(200)), 100).await;
    let mut doomed = GatewayProcess::start(&sim, &redis.url(), "", 0.2).await;
    let survivor = GatewayProcess::start(&sim, &redis.url(), "", 0.2).await;
    let http = client();
    let site = json!({"kind": "recaptcha_v2", "sitekey": "6Le-held-kill", "pageurl": "https://held.example/kill"});
    let tokens: Vec<Value> = (0..KILL_POOLED)
        .map(|i| json!({"token": format!("held-kill-{i}"), "solved_at": now_ms()}))
        .collect();
    let mut import = site.clone();
    import["tokens"] = tokens.into();
    let res = http
        .post(survivor.url("/v1/pools/tokens"))
        .bearer_auth(KEY)
        .json(&import)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());

    // Callers keep hitting the doomed gateway: each of its scripts ends one batch and takes the
    // next, so it holds one at the kill.
    let stop = CancellationToken::new();
    let hitters: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(hit(
                http.clone(),
                doomed.url("/v1/solve"),
                site.clone(),
                stop.clone(),
            ))
        })
        .collect();
    eventually(SOON, "the doomed gateway holds a batch", || async {
        !held_mails(&redis).is_empty()
    })
    .await;
    doomed.kill().await;
    stop.cancel();
    let mut from_doomed = Vec::new();
    for h in hitters {
        from_doomed.extend(h.await.unwrap());
    }
    let lost = held_mails(&redis);
    assert!(
        !lost.is_empty(),
        "the dead gateway's batch is still held in Redis"
    );
    let waste_before = stat(&redis, "expired_unused");

    // The survivor serves the rest of the pool; its arrivals reap the batch once its lease
    // lapses, and then its callers are solved.
    let mut from_survivor = Vec::new();
    let give_up = Instant::now() + SOON;
    loop {
        let mut body = site.clone();
        body["timeout_s"] = 20.into();
        let (status, v) = solve(&http, &survivor.base, body).await;
        assert_eq!(status, 200, "{v}");
        from_survivor.push(v["token"].as_str().expect("a token").to_owned());
        if v["source"] != "pool" && held_mails(&redis).is_empty() {
            break;
        }
        assert!(Instant::now() < give_up, "the batch was never reaped");
    }

    let mut seen = HashSet::new();
    for token in from_doomed.iter().chain(&from_survivor) {
        assert!(seen.insert(token), "{token} handed out twice");
    }
    for token in &lost {
        assert!(
            !from_survivor.contains(token),
            "{token} of the dead gateway's batch was handed out again"
        );
    }
    assert_eq!(
        stat(&redis, "expired_unused") - waste_before,
        lost.len() as u64,
        "the lapsed batch counts as waste"
    );
}

const KILL_POOLED: usize = 400;

/// Pool hits on `url` until `stop`; the tokens the callers got.
async fn hit(
    http: reqwest::Client,
    url: String,
    site: Value,
    stop: CancellationToken,
) -> Vec<String> {
    let mut got = Vec::new();
    while !stop.is_cancelled() {
        let mut body = site.clone();
        body["timeout_s"] = 5.into();
        let sent = http.post(&url).bearer_auth(KEY).json(&body).send().await;
        let Ok(res) = sent else { break };
        let Ok(v) = res.json::<Value>().await else {
            break;
        };
        if let Some(token) = v["token"].as_str() {
            got.push(token.to_owned());
        }
    }
    got
}

/// The tokens of every batch held in Redis now (mails `A|<expires_at>|<answer json>`).
fn held_mails(redis: &RedisServer) -> Vec<String> {
    let keys = cli(redis.port, &["--scan", "--pattern", "cg:{t:*}:held"]);
    keys.lines()
        .flat_map(|key| {
            let values = cli(redis.port, &["HVALS", key.trim()]);
            values
                .lines()
                .flat_map(|batch| serde_json::from_str::<Vec<String>>(batch).unwrap_or_default())
                .collect::<Vec<_>>()
        })
        .filter_map(|mail| {
            let json = mail.splitn(3, '|').nth(2)?.to_owned();
            let answer: Value = serde_json::from_str(&json).ok()?;
            Some(answer["text"].as_str()?.to_owned())
        })
        .collect()
}

/// A field of the one target's stats in Redis.
fn stat(redis: &RedisServer, field: &str) -> u64 {
    let keys = cli(redis.port, &["--scan", "--pattern", "cg:{t:*}:stats"]);
    let key = keys.lines().next().expect("the target's stats");
    cli(redis.port, &["HGET", key.trim(), field])
        .trim()
        .parse()
        .unwrap_or(0)
}

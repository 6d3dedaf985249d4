//! Endpoint tests: each drives a fresh simulator through `router(sim).oneshot(request)` on a
//! manual clock, so readiness and expiry are reached by moving time, never by sleeping.

mod faults;
mod results;
mod submit;
mod verify;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use tower::ServiceExt;

use super::{Clock, LatencyRange, SimSettings, Simulator, router};
use crate::model::Kind;

/// A well-formed API key (32 characters).
const KEY: &str = "0123456789abcdef0123456789abcdef";

/// Where the manual clock starts: a realistic epoch time, 2024-01-01.
const START: u64 = 1_704_067_200_000;

/// A minimal PNG header padded past the 100-byte minimum.
fn png(fill: u8) -> Vec<u8> {
    [b"\x89PNG\r\n\x1a\n".as_slice(), &[fill; 200]].concat()
}

struct Sim {
    sim: Arc<Simulator>,
    clock: Clock,
}

impl Sim {
    /// A simulator where every kind takes exactly one second, seeded, on a manual clock;
    /// `tweak` changes whatever one test needs.
    fn new(tweak: impl FnOnce(&mut SimSettings)) -> Sim {
        let mut settings = SimSettings {
            seed: Some(7),
            latency: Kind::ALL
                .into_iter()
                .map(|k| (k, LatencyRange::fixed(Duration::from_secs(1))))
                .collect(),
            ..SimSettings::default()
        };
        tweak(&mut settings);
        let clock = Clock::manual(START);
        Sim {
            sim: Simulator::with_clock(settings, clock.clone()),
            clock,
        }
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    async fn send(&self, req: Request<Body>) -> (StatusCode, String) {
        let res = router(self.sim.clone())
            .oneshot(req)
            .await
            .expect("the router is infallible");
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .expect("in-memory bodies read");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// GET `path?query`, returning the body of a 200 reply.
    async fn get(&self, path_and_query: &str) -> String {
        let req = Request::get(path_and_query)
            .body(Body::empty())
            .expect("valid test request");
        let (status, body) = self.send(req).await;
        assert_eq!(status, StatusCode::OK, "{path_and_query}: {body}");
        body
    }

    /// POST a urlencoded form to `path`.
    async fn post_form(&self, path: &str, pairs: &[(&str, &str)]) -> (StatusCode, String) {
        let req = Request::post(path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form(pairs)))
            .expect("valid test request");
        self.send(req).await
    }

    /// `res.php` with the test key and `query`.
    async fn res(&self, query: &str) -> String {
        self.get(&format!("/res.php?key={KEY}&{query}")).await
    }

    /// Submits `pairs` (plus the key) and returns the task id, asserting it was accepted.
    async fn submit(&self, pairs: &[(&str, &str)]) -> String {
        let mut all = vec![("key", KEY)];
        all.extend_from_slice(pairs);
        let (status, body) = self.post_form("/in.php", &all).await;
        assert_eq!(status, StatusCode::OK);
        let id = body
            .strip_prefix("OK|")
            .unwrap_or_else(|| panic!("not accepted: {body}"));
        id.to_owned()
    }

    async fn stats(&self) -> Value {
        json(&self.get("/stats").await)
    }
}

fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

const RECAPTCHA: &[(&str, &str)] = &[
    ("method", "userrecaptcha"),
    ("googlekey", "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"),
    ("pageurl", "https://shop.example/login"),
];

const TURNSTILE: &[(&str, &str)] = &[
    ("method", "turnstile"),
    ("sitekey", "0x4AAAAAAAC3DHQFLr1GavRN"),
    ("pageurl", "https://shop.example/"),
];

//! Micro-benchmarks of the pure functions on every request's path: target keys (URL
//! normalization and digest), compatible-API and native body parsing, upstream reply parsing, and the log
//! scrubber every log line passes through. Run with
//! `cargo bench --bench hot_paths`; the scenario benchmarks are `captcha-gateway bench`.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use captcha_gateway::model::{RecaptchaVersion, SolveRequest, Target, TargetPolicy, TaskParams};
use captcha_gateway::provider::{parse_reply, split_batch};
use captcha_gateway::wire::inphp::InPhpDialect;
use captcha_gateway::wire::inphp::{Params, parse_submit};
use captcha_gateway::wire::native::{parse_native, parse_native_value};
use criterion::{Criterion, criterion_group, criterion_main};

fn recaptcha() -> SolveRequest {
    SolveRequest::new(TaskParams::Recaptcha {
        sitekey: "6LeIxAcTAAAAAJcZVRqyHh71UMIEGNQ_MXjiZKhI".into(),
        pageurl: "https://Shop.Example.com/checkout/step-2/?session=8f3a9c&utm_source=mail#pay"
            .into(),
        version: RecaptchaVersion::V2,
        enterprise: false,
        invisible: true,
        action: None,
        min_score: None,
        data_s: None,
        domain: None,
    })
}

fn target_keys(c: &mut Criterion) {
    let req = recaptcha();
    c.bench_function("target_of_recaptcha", |b| {
        b.iter(|| Target::of(black_box(&req), TargetPolicy::default()))
    });
}

fn compat_parsing(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let body = Bytes::from_static(
        b"key=0123456789abcdef0123456789abcdef&method=userrecaptcha&googlekey=6LeIxAcTAAAAAJcZVRqyHh71UMIEGNQ_MXjiZKhI\
          &pageurl=https%3A%2F%2Fshop.example.com%2Fcheckout&invisible=1&enterprise=0&version=v2&soft_id=4580&json=1",
    );
    c.bench_function("compat_params_and_submit", |b| {
        b.iter(|| {
            let params = rt.block_on(Params::read(
                None,
                Some("application/x-www-form-urlencoded"),
                body.clone(),
            ));
            parse_submit(black_box(&params)).unwrap()
        })
    });
}

fn native_parsing(c: &mut Criterion) {
    let body = br#"{"kind":"recaptcha_v2","sitekey":"6LeIxAcTAAAAAJcZVRqyHh71UMIEGNQ_MXjiZKhI","pageurl":"https://shop.example.com/checkout","timeout_s":60}"#;
    c.bench_function("native_body_to_request", |b| {
        b.iter(|| parse_native(black_box(body), Duration::from_secs(600)).unwrap())
    });
    // The same through a JSON tree first (the queue's path, and `/v1/solve`'s before): the
    // one-pass read should cost less.
    c.bench_function("native_tree_to_request", |b| {
        b.iter(|| {
            let tree = serde_json::from_slice(black_box(body)).unwrap();
            parse_native_value(tree, Duration::from_secs(600)).unwrap()
        })
    });
}

fn upstream_parsing(c: &mut Criterion) {
    let token = format!("03AGdBq2{}", "x".repeat(480));
    let json = format!(r#"{{"status":1,"request":"{token}"}}"#);
    c.bench_function("parse_reply_json_token", |b| {
        b.iter(|| parse_reply(InPhpDialect::CaptchaAi, 200, black_box(&json)))
    });
    c.bench_function("parse_reply_html_502", |b| {
        b.iter(|| {
            parse_reply(
                InPhpDialect::CaptchaAi,
                502,
                black_box("<html><body><h1>502 Bad Gateway</h1></body></html>"),
            )
        })
    });
    let batch: Vec<String> = (0..100)
        .map(|i| {
            if i % 3 == 0 {
                "CAPCHA_NOT_READY".to_owned()
            } else {
                token.clone()
            }
        })
        .collect();
    let batch = batch.join("|");
    c.bench_function("split_batch_100_ids", |b| {
        b.iter(|| split_batch(black_box(&batch), 100, InPhpDialect::CaptchaAi))
    });
}

/// The log scrubber on one JSON debug line, with a hundred configured keys (tenants).
fn log_scrubbing(c: &mut Criterion) {
    // Keys that look like real ones (random hex), not like each other.
    let keys: Vec<String> = (1..=100u128)
        .map(|i| {
            format!(
                "{:032x}",
                i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
            )
        })
        .collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let redactor = captcha_gateway::telemetry::logs::Redactor::new(&keys);
    let line = r#"{"timestamp":"2026-12-01T17:27:11.487010Z","level":"DEBUG","fields":{"message":"upstream task solved","account":"sim","provider_task":"30374233658"},"target":"captcha_gateway::engine::solve","span":{"priority":"Interactive","target":"turnstile:b.example","name":"upstream_task"},"spans":[{"method":"POST","path":"/v1/solve","request_id":"abc-2","name":"request"}]}"#;
    c.bench_function("scrub_json_log_line", |b| {
        b.iter(|| redactor.scrub(black_box(line)))
    });
}

criterion_group!(
    benches,
    target_keys,
    compat_parsing,
    native_parsing,
    upstream_parsing,
    log_scrubbing
);
criterion_main!(benches);

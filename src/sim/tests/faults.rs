//! Injected faults switched at run time through `/faults`: each one shows up on the wire the
//! way a real provider's failure does, and switching it off restores normal service.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt;

use super::{KEY, RECAPTCHA, Sim, json};
use crate::sim::router;

impl Sim {
    async fn set_faults(&self, body: &str) -> (StatusCode, String) {
        let req = Request::post("/faults")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned()))
            .expect("valid test request");
        self.send(req).await
    }

    async fn clear_faults(&self) {
        let req = Request::delete("/faults")
            .body(Body::empty())
            .expect("valid test request");
        assert_eq!(self.send(req).await.0, StatusCode::OK);
    }

    async fn submit_text(&self) -> String {
        let mut pairs = vec![("key", KEY)];
        pairs.extend_from_slice(RECAPTCHA);
        let (status, body) = self.post_form("/in.php", &pairs).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

#[tokio::test]
async fn submit_faults_switch_on_and_off_at_run_time() {
    let s = Sim::new(|_| {});
    assert!(s.submit_text().await.starts_with("OK|"));

    let (status, body) = s.set_faults(r#"{"capacity_error_rate": 1}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(json(&body)["capacity_error_rate"], 1.0);
    assert_eq!(s.submit_text().await, "ERROR_NO_SLOT_AVAILABLE");

    s.set_faults(r#"{"capacity_error_rate": 0, "zero_balance_rate": 1}"#)
        .await;
    assert_eq!(s.submit_text().await, "ERROR_ZERO_BALANCE");

    s.clear_faults().await;
    assert!(s.submit_text().await.starts_with("OK|"));
    let st = s.stats().await;
    assert_eq!(
        (st["submits"].as_u64(), st["injected_errors"].as_u64()),
        (Some(2), Some(2)),
        "{st}"
    );
    assert_eq!(json(&s.get("/faults").await)["zero_balance_rate"], 0.0);
}

#[tokio::test]
async fn a_plain_text_error_comes_even_when_json_was_asked_for() {
    let s = Sim::new(|_| {});
    s.set_faults(r#"{"plain_error_rate": 1}"#).await;
    let mut pairs = vec![("key", KEY), ("json", "1")];
    pairs.extend_from_slice(RECAPTCHA);
    let (status, body) = s.post_form("/in.php", &pairs).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "ERROR_SERVER_ERROR")
    );
    s.clear_faults().await;
    let (_, body) = s.post_form("/in.php", &pairs).await;
    assert_eq!(json(&body)["status"], 1, "{body}");
}

#[tokio::test]
async fn a_malformed_reply_is_cut_off_json_and_a_dropped_one_never_completes() {
    let s = Sim::new(|_| {});
    let id = s.submit(RECAPTCHA).await;
    s.set_faults(r#"{"malformed_rate": 1}"#).await;
    let body = s.res(&format!("action=get&json=1&id={id}")).await;
    assert!(
        serde_json::from_str::<serde_json::Value>(&body).is_err(),
        "not JSON: {body}"
    );

    s.set_faults(r#"{"malformed_rate": 0, "drop_rate": 1}"#)
        .await;
    let req = Request::get(format!("/res.php?key={KEY}&action=get&id={id}"))
        .body(Body::empty())
        .expect("valid test request");
    let res = router(s.sim.clone())
        .oneshot(req)
        .await
        .expect("infallible");
    let read = axum::body::to_bytes(res.into_body(), usize::MAX).await;
    assert!(read.is_err(), "a dropped reply has no complete body");

    let st = s.stats().await;
    assert_eq!(
        (
            st["malformed_replies"].as_u64(),
            st["dropped_connections"].as_u64()
        ),
        (Some(1), Some(1)),
        "{st}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_reply_is_held_back_and_counted() {
    let s = Sim::new(|_| {});
    s.set_faults(r#"{"slow_rate": 1, "slow_ms": 30000}"#).await;
    let before = tokio::time::Instant::now();
    assert!(s.submit_text().await.starts_with("OK|"));
    // Virtual time: the reply came only after the clock moved past the hold.
    assert!(before.elapsed() >= std::time::Duration::from_secs(30));
    assert_eq!(s.stats().await["slow_replies"].as_u64(), Some(1));
}

#[tokio::test]
async fn bad_fault_settings_are_refused_by_name_and_change_nothing() {
    let s = Sim::new(|_| {});
    for (body, names) in [
        (r#"{"drop_rate": 1.5}"#, "drop_rate"),
        (
            r#"{"drop_rate": 0.6, "malformed_rate": 0.6}"#,
            "drop_rate + malformed_rate",
        ),
        (r#"{"slow_ms": 99999999999}"#, "slow_ms"),
        (r#"{"slow_rate": "often"}"#, "slow_rate"),
        (r#"{"dorp_rate": 1}"#, "dorp_rate"),
        ("not json", "JSON"),
    ] {
        let (status, reply) = s.set_faults(body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {reply}");
        let message = json(&reply)["error"]["message"].to_string();
        assert!(message.contains(names), "{body}: {message}");
    }
    assert_eq!(json(&s.get("/faults").await)["drop_rate"], 0.0);
    assert!(s.submit_text().await.starts_with("OK|"));
}

#[test]
fn faults_come_from_the_sim_table_and_bad_ones_name_the_setting() {
    use crate::cli::SimulateArgs;
    use crate::config::load_simulate;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("sim.toml");
    std::fs::write(
        &path,
        "[sim]\nserver_error_rate = 0.1\ncapacity_error_rate = 0.2\nzero_balance_rate = 0.3\n\
         drop_rate = 0.4\nmalformed_rate = 0.5\nslow_rate = 0.6\nslow_ms = 700\n",
    )
    .expect("written");
    let faults = load_simulate(&SimulateArgs::default(), Some(&path))
        .expect("valid faults")
        .faults;
    assert_eq!(
        (
            faults.server_error_rate,
            faults.capacity_error_rate,
            faults.zero_balance_rate,
            faults.drop_rate,
            faults.malformed_rate,
            faults.slow_rate,
            faults.slow_ms
        ),
        (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 700)
    );
    std::fs::write(&path, "[sim]\ndrop_rate = 0.7\nmalformed_rate = 0.7\n").expect("written");
    let err = load_simulate(&SimulateArgs::default(), Some(&path)).unwrap_err();
    assert!(
        err.to_string().contains("drop_rate + malformed_rate"),
        "{err}"
    );
}

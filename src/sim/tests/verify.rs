//! `/verify`, `/stats` and `serve`: tokens are single-use, expire, cannot be forged.

use super::*;

/// Submits `pairs`, lets the solve finish, and returns the answer text.
async fn solved(s: &Sim, pairs: &[(&str, &str)]) -> String {
    let id = s.submit(pairs).await;
    s.advance(Duration::from_secs(1));
    let reply = s.res(&format!("action=get&id={id}")).await;
    reply
        .strip_prefix("OK|")
        .unwrap_or_else(|| panic!("not solved: {reply}"))
        .to_owned()
}

#[tokio::test]
async fn a_token_verifies_once_then_is_a_duplicate() {
    let s = Sim::new(|_| {});
    let token = solved(&s, TURNSTILE).await;
    s.advance(Duration::from_millis(250));
    let v = json(&s.get(&format!("/verify?token={token}")).await);
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(v["error-codes"], serde_json::json!([]));
    assert_eq!(v["kind"], "turnstile");
    assert_eq!(v["solved_at"], START + 1_000);
    assert_eq!(v["age_ms"], 250);

    let v = json(&s.get(&format!("/verify?token={token}")).await);
    assert_eq!(v["success"], false);
    assert_eq!(v["error-codes"], serde_json::json!(["duplicate"]));
    let st = s.stats().await;
    assert_eq!(
        (st["verify_ok"].as_u64(), st["verify_duplicate"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn a_token_past_its_lifetime_is_expired() {
    let s = Sim::new(|c| {
        c.latency
            .insert(Kind::RecaptchaV2, LatencyRange::fixed(Duration::ZERO));
        c.lifetimes
            .insert(Kind::RecaptchaV2, Duration::from_millis(1));
    });
    let id = s.submit(RECAPTCHA).await;
    let token = s.res(&format!("action=get&id={id}")).await;
    let token = token.strip_prefix("OK|").expect("ready at once").to_owned();
    s.advance(Duration::from_millis(1));
    let v = json(&s.get(&format!("/verify?token={token}")).await);
    assert_eq!(v["error-codes"], serde_json::json!(["expired"]), "{v}");
    assert_eq!(v["success"], false);
    assert_eq!(s.stats().await["verify_expired"], 1);
}

#[tokio::test]
async fn forged_and_malformed_tokens_are_invalid() {
    let s = Sim::new(|_| {});
    let token = solved(&s, RECAPTCHA).await;
    // Same shape, one MAC digit changed.
    let last = token.chars().last().expect("non-empty token");
    let forged = format!(
        "{}{}",
        &token[..token.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    // A token from another simulator process: a different secret.
    let other = Sim::new(|_| {});
    let foreign = solved(&other, RECAPTCHA).await;
    for bad in [
        forged.as_str(),
        foreign.as_str(),
        "",
        "SIM-rc2-1-2-3",
        "%7C%7C",
    ] {
        let v = json(&s.get(&format!("/verify?token={bad}")).await);
        assert_eq!(
            v["error-codes"],
            serde_json::json!(["invalid"]),
            "{bad}: {v}"
        );
        assert!(v.get("kind").is_none());
    }
    let st = s.stats().await;
    assert_eq!(
        (st["verify_invalid"].as_u64(), st["verify_ok"].as_u64()),
        (Some(5), Some(0))
    );
    // The genuine token is still unused.
    let v = json(&s.get(&format!("/verify?response={token}")).await);
    assert_eq!(v["success"], true);
}

#[tokio::test]
async fn geetest_answers_carry_the_challenge_and_a_verifiable_validate() {
    let s = Sim::new(|_| {});
    let text = solved(
        &s,
        &[
            ("method", "geetest"),
            ("gt", "81388ea1fc187e0c335c0a8907ff2625"),
            ("challenge", "c0ffee"),
            ("pageurl", "https://shop.example/"),
        ],
    )
    .await;
    let g = json(&text);
    assert_eq!(g["geetest_challenge"], "c0ffee");
    assert_eq!(g["challenge"], "c0ffee");
    assert_eq!(g["validate"], g["geetest_validate"]);
    assert_eq!(g["seccode"], g["geetest_seccode"]);
    let validate = g["validate"].as_str().expect("validate is a string");
    let v = json(&s.get(&format!("/verify?token={validate}")).await);
    assert_eq!(
        (v["success"].as_bool(), v["kind"].as_str()),
        (Some(true), Some("geetest_v3"))
    );
}

#[tokio::test]
async fn used_tokens_are_forgotten_once_they_would_have_expired() {
    let s = Sim::new(|c| {
        c.lifetimes.insert(Kind::Turnstile, Duration::from_secs(2));
    });
    let token = solved(&s, TURNSTILE).await;
    assert_eq!(
        json(&s.get(&format!("/verify?token={token}")).await)["success"],
        true
    );
    s.advance(Duration::from_secs(2));
    assert_eq!(
        json(&s.get(&format!("/verify?token={token}")).await)["error-codes"],
        serde_json::json!(["expired"])
    );
    let used = super::super::lock(&s.sim.used_tokens).len();
    assert_eq!(used, 0);
}

#[tokio::test]
async fn serve_answers_on_a_real_socket_and_shuts_down() {
    let sim = Simulator::new(SimSettings::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(super::super::serve(sim, listener, async move {
        let _ = stopped.await;
    }));
    let body = reqwest::get(format!("http://{addr}/res.php?key={KEY}&action=getbalance"))
        .await
        .expect("the simulator answers")
        .text()
        .await
        .expect("a text body");
    assert_eq!(body, "100.00");
    let _ = stop.send(());
    let result = server.await.expect("the server task does not panic");
    assert!(result.is_ok(), "{result:?}");
}

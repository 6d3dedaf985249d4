//! Seed 000's story: 40 workers ask for one reCAPTCHA target at once, pool empty. The seed's
//! dedup lock hands one token to several callers; we must run exactly 40 upstream tasks and
//! hand out 40 distinct tokens, each valid once.

use std::collections::HashSet;

use futures::future::join_all;

use crate::support::TestGateway;

#[tokio::test]
async fn forty_concurrent_callers_get_forty_distinct_valid_tokens_from_forty_tasks() {
    let gw = TestGateway::start().await;
    let form = [
        ("method", "userrecaptcha"),
        ("googlekey", "6Le-burst-target"),
        ("pageurl", "https://example.com/login"),
    ];
    let answers = join_all((0..40).map(|_| gw.solve_compat(&form))).await;

    let mut tokens = HashSet::new();
    for a in &answers {
        assert_eq!(a["status"], 1, "every caller is served: {a}");
        tokens.insert(a["request"].as_str().unwrap().to_owned());
    }
    assert_eq!(tokens.len(), 40, "no token handed out twice");
    for t in &tokens {
        gw.verify(t)
            .await
            .unwrap_or_else(|e| panic!("token {t} did not verify: {e}"));
    }
    assert_eq!(
        gw.stat("submits").await,
        40,
        "exactly one upstream task per caller"
    );
    assert_eq!(gw.stat("verify_ok").await, 40);
    assert_eq!(gw.stat("verify_duplicate").await, 0);
    assert_eq!(gw.stat("verify_expired").await, 0);
}

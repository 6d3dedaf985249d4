//! Solves reCAPTCHA v2 tasks concurrently through a fleet of gateways, then prints how the
//! calls were spread and which gateways were ejected or let back.
//!
//!     CAPTCHA_GATEWAY_KEY=... cargo run -p captcha-gateway-client --example solve -- \
//!         http://10.0.0.11:8080 http://10.0.0.12:8080 http://10.0.0.13:8080
//!
//! `SITEKEY`, `PAGEURL` and `CALLS` (1 to 10000, default 10) set what is solved.

use captcha_gateway_client::{Client, SolveRequest};

#[tokio::main]
async fn main() {
    let backends: Vec<String> = std::env::args().skip(1).collect();
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let calls = match var("CALLS", "10").parse::<u32>() {
        Ok(n @ 1..=10_000) => n,
        _ => exit("CALLS: use a number from 1 to 10000"),
    };
    let mut builder = Client::builder().backends(&backends);
    if let Ok(key) = std::env::var("CAPTCHA_GATEWAY_KEY") {
        builder = builder.key(key);
    }
    let client = builder.build().unwrap_or_else(|e| exit(&e.to_string()));
    let request = SolveRequest::recaptcha_v2(
        &var("SITEKEY", "6Le-example-site-key"),
        &var("PAGEURL", "https://example.com/login"),
    );
    let mut solves = tokio::task::JoinSet::new();
    for i in 0..calls {
        let (client, request) = (client.clone(), request.clone());
        solves.spawn(async move { (i, client.solve(&request).await) });
    }
    while let Some(Ok((i, result))) = solves.join_next().await {
        match result {
            Ok(answer) => println!(
                "{i}: answered ({}), upstream task {:?}",
                answer.source, answer.task_id
            ),
            Err(e) => println!("{i}: failed: {e}"),
        }
    }
    for b in client.backends() {
        println!(
            "{}: served {}, failures {}, ejections {}, re-admissions {}, load {:?} %",
            b.address, b.served, b.failures, b.ejections, b.readmissions, b.load_pct
        );
    }
}

fn exit(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2)
}

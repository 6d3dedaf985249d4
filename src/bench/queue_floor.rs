//! The floors `queue`'s `instant` rate is read against, measured on the same machine in the same
//! run: what the provider protocol alone costs (one `in.php` submit and one `res.php` check per
//! task, with the workers' own HTTP client, against the same simulator, nothing else running),
//! and what one task's Redis work costs Redis (its CPU per task in the end-to-end run, Redis
//! being single-threaded).

use std::sync::Arc;

use futures::{StreamExt, stream};
use tokio::time::Instant;

use super::BenchError;
use super::load::{KEY, TargetSpec};
use super::report::RunResult;
use super::rig::{self, SimServer, secs};
use crate::model::SolveRequest;
use crate::provider::{InPhpProvider, PollOutcome, Provider};
use crate::wire::inphp::InPhpDialect;

/// Exchanges in flight at once: what the `instant` workers keep in flight together.
const IN_FLIGHT: usize = 1_000;

/// Tasks/s of the provider protocol alone, and the CPU it costs per task (this process is both
/// the client and the simulator here); records both.
pub async fn provider_protocol(tasks: usize, result: &mut RunResult) -> Result<(), BenchError> {
    let sim = SimServer::start(100_000, secs(0.0, 0.0)).await?;
    let http =
        InPhpProvider::http_client().map_err(|e| BenchError::Setup(format!("HTTP client: {e}")))?;
    let base = url::Url::parse(&format!("http://{}", sim.addr))
        .map_err(|e| BenchError::Setup(format!("simulator URL: {e}")))?;
    let provider = Arc::new(InPhpProvider::new(
        InPhpDialect::CaptchaAi,
        base,
        KEY.to_owned(),
        "floor".to_owned(),
        http,
    ));
    let site = TargetSpec::unique("floor");
    let request = SolveRequest::recaptcha_v2(site.sitekey, site.pageurl);
    let cpu_before = rig::cpu_seconds(std::process::id());
    let started = Instant::now();
    let answered = stream::iter(0..tasks)
        .map(|_| {
            let (provider, request) = (provider.clone(), &request);
            async move {
                let id = provider.submit(request).await.ok()?;
                match provider.poll(&[id], false).await.ok()?.pop()? {
                    PollOutcome::Ready { .. } => Some(()),
                    _ => None,
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter(|r| std::future::ready(r.is_some()))
        .count()
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = rig::cpu_seconds(std::process::id()) - cpu_before;
    if answered != tasks {
        result.fail(format!(
            "floor: {} of {tasks} provider exchanges did not end with an answer",
            tasks - answered
        ));
    }
    result.info(
        "floor: provider protocol alone (submit + check), tasks/s",
        tasks as f64 / elapsed,
        "/s",
    );
    result.info(
        "floor: provider protocol CPU per task (client + simulator)",
        cpu * 1000.0 / tasks as f64,
        "ms",
    );
    Ok(())
}

//! The engine's log context (docs/CONFIGURATION.md "Logs"): each upstream task runs in its own
//! span, a child of whatever started it — a caller's request (whose span carries the request
//! id), a pool refill, a queue entry — so every line the task logs names who started it. Callers
//! that join tasks already running log which provider task answered them.

use tracing::Span;

use super::types::Priority;
use crate::model::{Answer, Source, Target};

/// The span of one upstream task started now, under the current span.
pub(super) fn upstream_task(target: &Target, priority: Priority) -> Span {
    let span = tracing::info_span!(
        "upstream_task",
        target = %target.label,
        priority = ?priority,
    );
    tracing::debug!(parent: &span, "upstream task started");
    span
}

/// A caller found tasks of its target in flight (or a reusable target's leader) and waits on
/// them instead of starting one.
pub(super) fn joined(target: &Target) {
    tracing::debug!(target = %target.label, "joined the upstream tasks in flight for the target");
}

/// What a caller was handed, with the provider task that produced it.
pub(super) fn handed(answer: &Answer, source: Source) {
    match &answer.upstream {
        Some(up) => tracing::debug!(
            ?source,
            account = %up.account,
            provider_task = %up.task_id,
            "answer handed to the caller"
        ),
        None => tracing::debug!(?source, "answer handed to the caller"),
    }
}

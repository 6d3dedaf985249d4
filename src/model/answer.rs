use super::Millis;

/// What a solve returned, with the times that decide whether it may still be handed out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Answer {
    /// The token, cookie or text. For GeeTest, a JSON object with both the `geetest_*` keys and
    /// the un-prefixed ones, so every client flavour finds its fields.
    pub text: String,
    /// The user agent the answer is bound to, where the provider reports one.
    pub user_agent: Option<String>,
    /// When the provider reported it ready: lifetimes count from here (promise 2).
    pub solved_at: Millis,
    /// When it stops being usable.
    pub expires_at: Millis,
    /// The upstream task that produced it, so `reportbad`/`reportgood` reach the right account.
    pub upstream: Option<UpstreamRef>,
}

impl Answer {
    /// Whether at least `min_remaining_ms` of life is left at `now`.
    pub fn fresh_at(&self, now: Millis, min_remaining_ms: u64) -> bool {
        self.expires_at >= now.saturating_add(min_remaining_ms)
    }
}

/// One upstream task: which account ran it and the provider's id for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct UpstreamRef {
    pub account: String,
    pub task_id: String,
}

/// Where a handed-out answer came from; reported to native-API callers and in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Taken from a warm pool of spare answers.
    Pool,
    /// Solved upstream for this caller (or the caller inherited an in-flight task).
    Solved,
    /// A reusable answer shared with other callers (coalesced or cached).
    Shared,
}

/// Answers by the source the engine handed them out from: a pool, a task solved for the
/// caller (or inherited), or a reusable answer shared with other callers.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BySource<T> {
    pub pool: T,
    pub solved: T,
    pub shared: T,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Pool => "pool",
            Source::Solved => "solved",
            Source::Shared => "shared",
        }
    }
}

//! An in-memory [`Provider`] with scripted answers, for tests of the account and the poller
//! under `tokio::time::pause()` (no sockets, so virtual time is exact).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::model::SolveRequest;
use crate::provider::{ErrorClass, PollOutcome, Provider, ProviderError, ThreadsInfo};

#[derive(Default)]
struct State {
    submit_errors: VecDeque<ProviderError>,
    /// Returned for every submit once the script is used up, if set.
    submit_error_forever: Option<ProviderError>,
    /// A plan's threads: a submit with this many tasks in flight is refused with the error.
    plan: Option<(u32, ProviderError)>,
    poll_errors: VecDeque<ProviderError>,
    /// Checks a task needs before it is ready; `None` = never ready.
    ready_after: Option<u32>,
    /// When set, a task is ready this long after its submit instead (virtual time): the first
    /// figure, plus a share of the second that differs per task (spread evenly over the range).
    solve_time: Option<(Duration, Duration)>,
    ready_at: HashMap<String, Instant>,
    next_id: u64,
    checks: HashMap<String, u32>,
    submits: Vec<Instant>,
    polls: Vec<(Instant, Vec<String>, bool)>,
    in_flight: u32,
    max_in_flight: u32,
}

pub struct FakeProvider {
    state: Mutex<State>,
    /// How many poll calls came so far, for tests that wait on checks without a clock.
    polled: tokio::sync::watch::Sender<usize>,
}

impl FakeProvider {
    /// Tasks are ready on their first check.
    pub fn new() -> Self {
        let state = State {
            ready_after: Some(1),
            ..State::default()
        };
        Self {
            state: Mutex::new(state),
            polled: tokio::sync::watch::Sender::new(0),
        }
    }

    fn with(self, f: impl FnOnce(&mut State)) -> Self {
        f(&mut self.state.lock().unwrap());
        self
    }

    pub fn ready_after(self, checks: u32) -> Self {
        self.with(|s| s.ready_after = Some(checks))
    }

    /// Tasks are ready `d` after their submit, however often they are checked.
    pub fn solve_time(self, d: Duration) -> Self {
        self.with(|s| s.solve_time = Some((d, Duration::ZERO)))
    }

    /// Tasks are ready somewhere in `min..min + spread` after their submit (golden-ratio steps,
    /// so any run of tasks covers the range evenly).
    pub fn solve_times(self, min: Duration, spread: Duration) -> Self {
        self.with(|s| s.solve_time = Some((min, spread)))
    }

    /// Changes the solve times of tasks submitted from now on (a provider getting slower).
    pub fn set_solve_times(&self, min: Duration, spread: Duration) {
        self.state.lock().unwrap().solve_time = Some((min, spread));
    }

    pub fn never_ready(self) -> Self {
        self.with(|s| s.ready_after = None)
    }

    pub fn submit_errors(self, errors: Vec<ProviderError>) -> Self {
        self.with(|s| s.submit_errors = errors.into())
    }

    pub fn submit_error_forever(self, error: ProviderError) -> Self {
        self.with(|s| s.submit_error_forever = Some(error))
    }

    /// A plan of `threads`: a submit while that many tasks run is refused with `error`.
    pub fn plan(self, threads: u32, error: ProviderError) -> Self {
        self.with(|s| s.plan = Some((threads, error)))
    }

    /// The next submit is refused with `error` (a provider short for a moment).
    pub fn refuse_next(&self, error: ProviderError) {
        self.state.lock().unwrap().submit_errors.push_back(error);
    }

    pub fn poll_errors(self, errors: Vec<ProviderError>) -> Self {
        self.with(|s| s.poll_errors = errors.into())
    }

    /// When each submit call came.
    pub fn submit_times(&self) -> Vec<Instant> {
        self.state.lock().unwrap().submits.clone()
    }

    /// Every poll call: when, which ids, whether extras were asked for.
    pub fn polls(&self) -> Vec<(Instant, Vec<String>, bool)> {
        self.state.lock().unwrap().polls.clone()
    }

    /// Resolves once `n` poll calls have come (at once if they have).
    pub async fn polled(&self, n: usize) {
        let mut rx = self.polled.subscribe();
        rx.wait_for(|polls| *polls >= n)
            .await
            .expect("the sender lives in self");
    }

    /// The most tasks that were accepted and not yet answered at any moment.
    pub fn max_in_flight(&self) -> u32 {
        self.state.lock().unwrap().max_in_flight
    }
}

#[async_trait]
impl Provider for FakeProvider {
    fn name(&self) -> &str {
        "fake"
    }

    async fn submit(&self, _req: &SolveRequest) -> Result<String, ProviderError> {
        let mut s = self.state.lock().unwrap();
        s.submits.push(Instant::now());
        if let Some(e) = s
            .submit_errors
            .pop_front()
            .or(s.submit_error_forever.clone())
        {
            return Err(e);
        }
        if let Some((threads, e)) = &s.plan {
            if s.in_flight >= *threads {
                return Err(e.clone());
            }
        }
        s.next_id += 1;
        let id = format!("{}", 1000 + s.next_id);
        s.checks.insert(id.clone(), 0);
        if let Some((min, spread)) = s.solve_time {
            let share = (s.next_id as f64 * 0.618_033_988_75).fract();
            let d = min + spread.mul_f64(share);
            s.ready_at.insert(id.clone(), Instant::now() + d);
        }
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        Ok(id)
    }

    async fn poll(
        &self,
        ids: &[String],
        with_extras: bool,
    ) -> Result<Vec<PollOutcome>, ProviderError> {
        let mut s = self.state.lock().unwrap();
        s.polls.push((Instant::now(), ids.to_vec(), with_extras));
        self.polled.send_replace(s.polls.len());
        if let Some(e) = s.poll_errors.pop_front() {
            return Err(e);
        }
        let ready_after = s.ready_after;
        let mut out = Vec::new();
        for id in ids {
            let ready_at = s.ready_at.get(id).copied();
            let Some(checks) = s.checks.get_mut(id) else {
                out.push(PollOutcome::Failed(ProviderError::new(
                    ErrorClass::Permanent,
                    "ERROR_WRONG_CAPTCHA_ID",
                    "",
                )));
                continue;
            };
            *checks += 1;
            let ready = match ready_at {
                Some(at) => Instant::now() >= at,
                None => ready_after.is_some_and(|n| *checks >= n),
            };
            if ready {
                s.checks.remove(id);
                s.ready_at.remove(id);
                s.in_flight -= 1;
                out.push(PollOutcome::Ready {
                    text: format!("answer-{id}"),
                    user_agent: with_extras.then(|| "UA/1".to_owned()),
                    price: None,
                });
            } else {
                out.push(PollOutcome::NotReady);
            }
        }
        Ok(out)
    }

    async fn report(&self, _task_id: &str, _good: bool) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn balance(&self) -> Result<String, ProviderError> {
        Ok("1.5".to_owned())
    }

    async fn threads_info(&self) -> Result<ThreadsInfo, ProviderError> {
        Ok(ThreadsInfo {
            threads: 5,
            working_threads: self.state.lock().unwrap().in_flight,
        })
    }
}

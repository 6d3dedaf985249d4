//! The model-based property: random sequences of puts, callers arriving (to stay, or to leave at
//! once), callers giving up or leaving with an answer to hand on, task ends (answer, failure,
//! stale), refills and time passing, checked step by step against a plain-Rust model of what the
//! store must do: who gets which answer (once, oldest first), who fails, how many tasks start.

use std::collections::VecDeque;

use captcha_gateway::engine::SolveFailure;
use captcha_gateway::engine::store::{Arrival, ClaimId, Finished, Store, TaskOutcome, WaiterId};
use captcha_gateway::model::Answer;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::backend::*;

#[derive(Debug, Clone)]
pub enum Op {
    /// An answer with this much life left arrives (an import): oldest waiter, else the pool.
    Put(u64),
    /// A caller arrives and stays until served or until it leaves.
    Arrive,
    /// A caller arrives and leaves at once.
    Take,
    /// The waiting caller at this index (modulo how many wait) gives up.
    Leave(usize),
    /// The oldest caller holding a delivered answer leaves and hands it on.
    PassOn,
    /// The oldest running task ends with an answer with this much life left.
    Finish(u64),
    /// The oldest running task fails.
    Fail,
    /// The oldest running task's answer came back too old to use.
    Stale,
    /// A refill claims a task nobody asked for.
    Reserve,
    /// Time passes.
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..120_000).prop_map(Op::Put),
        3 => Just(Op::Arrive),
        2 => Just(Op::Take),
        1 => (0usize..8).prop_map(Op::Leave),
        1 => Just(Op::PassOn),
        3 => (1u64..120_000).prop_map(Op::Finish),
        1 => Just(Op::Fail),
        1 => Just(Op::Stale),
        1 => Just(Op::Reserve),
        2 => (1u64..60_000).prop_map(Op::Advance),
    ]
}

/// A caller the model has told to wait.
struct Caller {
    id: WaiterId,
    rx: Mailbox,
}

/// What the store must hold, in plain Rust: expiries in the pool, running tasks, callers in
/// arrival order, callers holding an answer, counters.
struct Model {
    now: u64,
    pool: Vec<u64>,
    running: Vec<ClaimId>,
    waiting: VecDeque<Caller>,
    served: VecDeque<(WaiterId, Answer)>,
    waste: u64,
    hits: u64,
    waits: u64,
    new_tasks: u64,
    refills: u64,
}

impl Model {
    fn new(now: u64) -> Self {
        Model {
            now,
            pool: Vec::new(),
            running: Vec::new(),
            waiting: VecDeque::new(),
            served: VecDeque::new(),
            waste: 0,
            hits: 0,
            waits: 0,
            new_tasks: 0,
            refills: 0,
        }
    }

    /// Answers too close to expiry for a caller now leave the pool as waste.
    fn drop_stale(&mut self) {
        let before = self.pool.len();
        let min_expiry = self.now + MIN_REMAINING;
        self.pool.retain(|&e| e >= min_expiry);
        self.waste += (before - self.pool.len()) as u64;
    }

    /// An answer with no caller attached: waste with less than `MIN_REMAINING` left (every
    /// hand-off keeps the freshness rule), else the oldest waiter (whose mailbox must hold exactly
    /// it), else the pool.
    fn place(&mut self, a: Answer) -> Result<(), TestCaseError> {
        if a.expires_at < self.now + MIN_REMAINING {
            self.waste += 1;
            return Ok(());
        }
        let Some(mut oldest) = self.waiting.pop_front() else {
            self.pool.push(a.expires_at);
            return Ok(());
        };
        let got = oldest.rx.try_recv().map(|d| d.map(|a| a.text));
        prop_assert_eq!(got, Ok(Ok(a.text.clone())), "the oldest waiter gets it");
        self.served.push_back((oldest.id, a));
        Ok(())
    }

    /// A task whose answer was stale ended: waste, and a restart exactly when a waiter is left
    /// uncovered.
    fn stale_finish(&mut self, done: Finished) -> Result<(), TestCaseError> {
        self.waste += 1;
        let uncovered = self.waiting.len() > self.running.len();
        match done {
            Finished::Restart(next) => {
                prop_assert!(uncovered, "restarted with every waiter covered");
                self.running.push(next);
                self.new_tasks += 1;
            }
            Finished::Done => prop_assert!(!uncovered, "left a waiter uncovered"),
        }
        Ok(())
    }

    /// The oldest waiter no running task covers gets a failure.
    fn fail_uncovered(&mut self) -> Result<(), TestCaseError> {
        if self.waiting.len() > self.running.len() {
            let mut oldest = self.waiting.pop_front().expect("a waiter");
            let got = oldest.rx.try_recv().map(|d| d.map_err(|f| f.code));
            prop_assert_eq!(
                got,
                Ok(Err("ERROR_X".to_owned())),
                "the uncovered waiter fails"
            );
        }
        Ok(())
    }
}

pub async fn run_case(s: &dyn Store, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let t = target();
    let mut m = Model::new(10_000_000);
    for (i, op) in ops.into_iter().enumerate() {
        let now = m.now;
        match op {
            Op::Advance(dt) => m.now += dt,
            Op::Put(left) => {
                let a = answer(format!("p{i}"), now, left);
                s.put(&t, a.clone(), now).await.unwrap();
                m.place(a)?;
            }
            Op::Reserve => {
                // A pool one bigger than what is pooled and coming lacks exactly one refill.
                let c = s.counts(&t, now, MIN_REMAINING).await.unwrap();
                let size = c.pooled + c.in_flight.saturating_sub(c.waiting) + 1;
                let mut claims = s
                    .reserve(&t, u32::try_from(size).unwrap(), now)
                    .await
                    .unwrap();
                prop_assert_eq!(claims.len(), 1);
                m.running.push(claims.remove(0));
                m.new_tasks += 1;
                m.refills += 1;
            }
            Op::Finish(_) | Op::Fail | Op::Stale if m.running.is_empty() => {}
            Op::Finish(left) if left < MIN_REMAINING => {
                // Too little life left to hand out: a stale answer (waste, maybe a restart).
                let claim = m.running.remove(0);
                let a = answer(format!("f{i}"), now, left);
                let done = s
                    .finish(&t, &claim, TaskOutcome::Answer(a), true, now)
                    .await
                    .unwrap();
                m.stale_finish(done)?;
            }
            Op::Finish(left) => {
                let claim = m.running.remove(0);
                let a = answer(format!("f{i}"), now, left);
                let outcome = TaskOutcome::Answer(a.clone());
                let done = s.finish(&t, &claim, outcome, true, now).await.unwrap();
                prop_assert_eq!(done, Finished::Done);
                m.place(a)?;
            }
            Op::Fail => {
                let claim = m.running.remove(0);
                let outcome = TaskOutcome::Failed(SolveFailure::new("ERROR_X", "model"));
                let done = s.finish(&t, &claim, outcome, true, now).await.unwrap();
                prop_assert_eq!(done, Finished::Done, "a failure restarts nothing");
                m.fail_uncovered()?;
            }
            Op::Stale => {
                let claim = m.running.remove(0);
                let done = s
                    .finish(&t, &claim, TaskOutcome::Stale, true, now)
                    .await
                    .unwrap();
                m.stale_finish(done)?;
            }
            Op::Arrive | Op::Take => {
                m.drop_stale();
                let expected = m.pool.iter().copied().enumerate().min_by_key(|(_, e)| *e);
                let id = waiter(s);
                let covered = m.waiting.len() < m.running.len();
                let context = format!(
                    "pool {:?}, running {}, waiting {}",
                    m.pool,
                    m.running.len(),
                    m.waiting.len()
                );
                match s.arrive(&t, &id, now, MIN_REMAINING).await.unwrap() {
                    Arrival::Pooled(a) => {
                        let (idx, exp) = expected
                            .ok_or_else(|| TestCaseError::fail("pooled answer the model lacks"))?;
                        prop_assert_eq!(a.expires_at, exp, "earliest fresh expiry first");
                        m.pool.remove(idx);
                        m.hits += 1;
                        continue;
                    }
                    Arrival::Wait(rx) => {
                        prop_assert!(expected.is_none() && covered, "waited with {}", context);
                        m.waits += 1;
                        m.waiting.push_back(Caller { id, rx });
                    }
                    Arrival::Start(rx, claim) => {
                        prop_assert!(expected.is_none() && !covered, "started with {}", context);
                        m.running.push(claim);
                        m.new_tasks += 1;
                        m.waiting.push_back(Caller { id, rx });
                    }
                }
                if matches!(op, Op::Take) {
                    let caller = m.waiting.pop_back().expect("just arrived");
                    drop(caller.rx);
                    s.abandon(&t, &caller.id, None, true, now).await.unwrap();
                }
            }
            Op::Leave(k) => {
                if m.waiting.is_empty() {
                    continue;
                }
                let k = k % m.waiting.len();
                let caller = m.waiting.remove(k).expect("in range");
                drop(caller.rx);
                s.abandon(&t, &caller.id, None, true, now).await.unwrap();
            }
            Op::PassOn => {
                let Some((id, a)) = m.served.pop_front() else {
                    continue;
                };
                s.abandon(&t, &id, Some(Ok(a.clone())), true, now)
                    .await
                    .unwrap();
                m.place(a)?;
            }
        }
        // Nobody got anything the model did not hand them.
        for c in m.waiting.iter_mut() {
            prop_assert!(
                still_waiting(&mut c.rx),
                "an unexpected delivery after op {}",
                i
            );
        }
    }
    let counts = s.counts(&t, m.now, MIN_REMAINING).await.unwrap();
    m.drop_stale();
    prop_assert_eq!(counts.pooled, m.pool.len() as u64, "pooled at the end");
    prop_assert_eq!(
        counts.in_flight,
        m.running.len() as u64,
        "in flight at the end"
    );
    prop_assert_eq!(counts.waiting, m.waiting.len() as u64, "waiting at the end");
    if let Some(f) = s
        .figures()
        .await
        .unwrap()
        .into_iter()
        .find(|f| f.id == t.id)
    {
        prop_assert_eq!(
            (
                f.expired_unused,
                f.pool_hits,
                f.waits_served,
                f.new_tasks,
                f.refills
            ),
            (m.waste, m.hits, m.waits, m.new_tasks, m.refills),
            "(waste, hits, waits, new tasks, refills)"
        );
    }
    Ok(())
}

/// The model names the answer each caller gets (the earliest fresh expiry) and what the pool
/// holds after every step. A local claim batch changes both for as long as it is held, by design:
/// answers put meanwhile wait behind the ones in hand, which the pool's count leaves out. So the
/// model runs with batches off; `single_use::a_rush_served_from_held_batches_...` checks the
/// promises a batch keeps (each answer once, the rest back in the pool).
fn model_tuning() -> Tuning {
    Tuning {
        batches: false,
        ..Tuning::default()
    }
}

pub fn random_sequences_match_the_model<B: Backend>() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backend = rt.block_on(B::start(model_tuning()));
    let store = rt.block_on(backend.instance());
    let config = ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..40))| {
        rt.block_on(run_case(&*store, ops))?;
    });
}

/// Sequences that once failed (kept here by hand: adding ops changed the generator, so the
/// saved seeds of the old Redis-only property no longer name them).
pub async fn saved_sequences_match_the_model<B: Backend>() {
    let backend = B::start(model_tuning()).await;
    let store = backend.instance().await;
    let saved = [
        // A claim must not expire while its instance lives (the lease outlasts any clock here).
        vec![Op::Take, Op::Advance(15_001), Op::Take],
    ];
    for ops in saved {
        run_case(&*store, ops.clone())
            .await
            .unwrap_or_else(|e| panic!("{ops:?}: {e}"));
    }
}

//! The simulator's task table: which tasks exist, when each becomes ready, how many hold a thread.
//!
//! Owns admission under the thread limit, readiness (computed from the clock at each call, so no
//! per-task timers), exact concurrency figures and forgetting tasks 15 minutes after they are
//! ready. Does not own answers (built before admission) or HTTP. Every method takes `now`, so
//! tests move time by hand.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use super::stats::TaskCounts;
use crate::model::{Answer, Kind, Millis};

/// How long a finished task stays pollable (docs/PROTOCOL.md item 14: at least 15 minutes).
pub(crate) const RETENTION: Duration = Duration::from_secs(15 * 60);

/// How a task ends, decided when it is submitted and revealed once it is ready.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Solved(Answer),
    Unsolvable,
}

/// A task as the submit path hands it over.
#[derive(Debug, Clone)]
pub(crate) struct NewTask {
    pub kind: Kind,
    pub ready_at: Millis,
    pub outcome: Outcome,
}

/// What a poll of one id found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Poll {
    NotReady,
    Ready(Kind, Answer),
    Unsolvable,
    Unknown,
}

/// What a report about one id did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Report {
    Recorded,
    Duplicate,
    Unknown,
}

#[derive(Debug)]
struct Task {
    task: NewTask,
    reported: bool,
    /// When a poll first found it ready: the moment its answer left for the gateway.
    delivered_at: Option<Millis>,
}

/// All live tasks. Callers wrap it in a mutex and call one method per critical section.
#[derive(Debug)]
pub(crate) struct TaskTable {
    tasks: HashMap<u64, Task>,
    /// Ready times (and whether the task was solved) of tasks still holding a thread: a min-heap,
    /// so the ones that finished are popped before anything is counted.
    solving: BinaryHeap<Reverse<(Millis, bool)>>,
    /// When each task is forgotten, earliest first; ready times are not in submit order, so a
    /// queue would not do.
    forget: BinaryHeap<Reverse<(Millis, u64)>>,
    next_id: u64,
    counts: TaskCounts,
}

impl TaskTable {
    /// An empty table whose first task id is `first_id` (ids then count up, so they are unique).
    pub fn new(first_id: u64) -> Self {
        Self {
            tasks: HashMap::new(),
            solving: BinaryHeap::new(),
            forget: BinaryHeap::new(),
            next_id: first_id,
            counts: TaskCounts::default(),
        }
    }

    /// Adds a task if fewer than `threads` tasks are being solved at `now`; returns its id, or
    /// `None` when every thread is busy.
    pub fn admit(&mut self, now: Millis, threads: u32, task: NewTask) -> Option<u64> {
        self.settle(now);
        if self.solving.len() >= threads as usize {
            return None;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let solved = matches!(task.outcome, Outcome::Solved(_));
        self.solving.push(Reverse((task.ready_at, solved)));
        let retention = RETENTION.as_millis() as Millis;
        self.forget
            .push(Reverse((task.ready_at.saturating_add(retention), id)));
        self.tasks.insert(
            id,
            Task {
                task,
                reported: false,
                delivered_at: None,
            },
        );
        // A task with no solve time never holds a thread: settle again before the peak is taken.
        self.settle(now);
        self.counts.peak = self.counts.peak.max(self.solving.len() as u64);
        Some(id)
    }

    /// The state of task `id` at `now`.
    pub fn poll(&mut self, now: Millis, id: u64) -> Poll {
        self.settle(now);
        let Some(Task {
            task, delivered_at, ..
        }) = self.tasks.get_mut(&id)
        else {
            return Poll::Unknown;
        };
        if task.ready_at > now {
            return Poll::NotReady;
        }
        if delivered_at.is_none() {
            *delivered_at = Some(now);
            let delay = now.saturating_sub(task.ready_at);
            self.counts.fetched += 1;
            self.counts.fetch_delay_total = self.counts.fetch_delay_total.saturating_add(delay);
            self.counts.fetch_delay_max = self.counts.fetch_delay_max.max(delay);
        }
        match &task.outcome {
            Outcome::Solved(answer) => Poll::Ready(task.kind, answer.clone()),
            Outcome::Unsolvable => Poll::Unsolvable,
        }
    }

    /// When a poll first found task `id` ready (`None`: not yet, or not a task of ours).
    pub fn delivered_at(&self, id: u64) -> Option<Millis> {
        self.tasks.get(&id)?.delivered_at
    }

    /// Records a `reportbad`/`reportgood` about task `id`; one report per task.
    pub fn report(&mut self, now: Millis, id: u64) -> Report {
        self.settle(now);
        match self.tasks.get_mut(&id) {
            None => Report::Unknown,
            Some(t) if t.reported => Report::Duplicate,
            Some(t) => {
                t.reported = true;
                Report::Recorded
            }
        }
    }

    /// Solved/unsolvable totals and the concurrency figures at `now`.
    pub fn counts(&mut self, now: Millis) -> TaskCounts {
        self.settle(now);
        TaskCounts {
            current: self.solving.len() as u64,
            ..self.counts
        }
    }

    /// How many tasks hold a thread at `now` (`threadsinfo`'s `working_threads`).
    pub fn working(&mut self, now: Millis) -> u64 {
        self.settle(now);
        self.solving.len() as u64
    }

    /// How many tasks are remembered (tests check that memory stays bounded).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Frees the threads of tasks ready by `now` and forgets tasks past their retention.
    fn settle(&mut self, now: Millis) {
        while let Some(&Reverse((ready_at, solved))) = self.solving.peek() {
            if ready_at > now {
                break;
            }
            self.solving.pop();
            if solved {
                self.counts.solved += 1;
            } else {
                self.counts.unsolvable += 1;
            }
        }
        while let Some(&Reverse((forget_at, id))) = self.forget.peek() {
            if forget_at > now {
                break;
            }
            self.forget.pop();
            self.tasks.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(ready_at: Millis, outcome: Outcome) -> NewTask {
        NewTask {
            kind: Kind::Text,
            ready_at,
            outcome,
        }
    }

    fn answer() -> Outcome {
        Outcome::Solved(Answer {
            text: "abc".into(),
            user_agent: None,
            solved_at: 0,
            expires_at: 0,
            upstream: None,
        })
    }

    #[test]
    fn threads_are_held_until_ready_and_peak_is_exact() {
        let mut t = TaskTable::new(10_000_000_000);
        let a = t.admit(0, 2, task(100, answer())).unwrap();
        let b = t.admit(10, 2, task(50, Outcome::Unsolvable)).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.admit(20, 2, task(200, answer())), None);
        assert_eq!(t.working(49), 2);
        // At 50 task b is ready and its thread is free again.
        assert!(t.admit(50, 2, task(300, answer())).is_some());
        let c = t.counts(100);
        assert_eq!((c.current, c.peak, c.solved, c.unsolvable), (1, 2, 1, 1));
    }

    #[test]
    fn tasks_with_no_solve_time_never_hold_a_thread() {
        let mut t = TaskTable::new(1);
        for _ in 0..3 {
            assert!(t.admit(0, 1, task(0, answer())).is_some());
        }
        let c = t.counts(0);
        assert_eq!((c.current, c.peak, c.solved), (0, 0, 3));
    }

    #[test]
    fn polls_follow_the_clock_and_tasks_are_forgotten_after_retention() {
        let mut t = TaskTable::new(1);
        let id = t.admit(0, 1, task(100, answer())).unwrap();
        assert_eq!(t.poll(99, id), Poll::NotReady);
        assert_eq!(t.delivered_at(id), None);
        assert!(matches!(t.poll(100, id), Poll::Ready(Kind::Text, _)));
        assert!(matches!(t.poll(150, id), Poll::Ready(Kind::Text, _)));
        assert_eq!(t.delivered_at(id), Some(100), "the first delivery counts");
        assert_eq!(t.report(100, id), Report::Recorded);
        assert_eq!(t.report(100, id), Report::Duplicate);
        assert_eq!(t.poll(100, id + 1), Poll::Unknown);
        let gone = 100 + RETENTION.as_millis() as Millis;
        assert!(matches!(t.poll(gone - 1, id), Poll::Ready(..)));
        assert_eq!(t.poll(gone, id), Poll::Unknown);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_wait_from_ready_to_first_fetch_is_counted_once_per_task() {
        let mut t = TaskTable::new(1);
        let prompt = t.admit(0, 2, task(100, answer())).unwrap();
        let late = t.admit(0, 2, task(200, answer())).unwrap();
        assert_eq!(t.poll(99, prompt), Poll::NotReady);
        assert!(matches!(t.poll(100, prompt), Poll::Ready(..)));
        assert!(matches!(t.poll(230, late), Poll::Ready(..)));
        assert!(
            matches!(t.poll(260, late), Poll::Ready(..)),
            "a second fetch"
        );
        let c = t.counts(260);
        assert_eq!(
            (c.fetched, c.fetch_delay_total, c.fetch_delay_max),
            (2, 30, 30)
        );
    }
}

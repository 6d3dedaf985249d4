//! Every key name of the store, one function per key. Each target's keys share the literal hash
//! tag `{t:<target id>}` so one script's keys live in one Cluster slot; a task record and an
//! instance inbox carry their own tags. Nothing else in the store builds a key, and no script
//! does. The thread budget's keys are its own (`provider/budget/redis/call.rs`), as are the
//! queue's (`queue/keys.rs`, `queue/seed/keys.rs`).

/// The fifteen keys of a single-use target, in the order the target scripts' prelude expects;
/// `op` names the operation whose reply is recorded (see `lua/lib/target.lua`).
pub fn target_keys(target_id: &str, op: &str) -> [String; 15] {
    [
        pool(target_id),
        waiters(target_id),
        wlease(target_id),
        inflight(target_id),
        mbox(target_id),
        mlease(target_id),
        stats(target_id),
        target_key(target_id, &["op:", op]),
        target_key(target_id, &["fin"]),
        target_key(target_id, &["gone"]),
        target_key(target_id, &["notes"]),
        target_key(target_id, &["orphans"]),
        target_key(target_id, &["adopted"]),
        target_key(target_id, &["held"]),
        target_key(target_id, &["holds"]),
    ]
}

/// `cg:{t:<target id>}:<name>`. Built by appending, not `format!`: fifteen of these are named
/// for every script call on the pool hit path, where the formatting machinery cost ~2 % of a
/// hit's CPU (docs/BENCHMARKS.md "Hot path and capacity").
fn target_key(target_id: &str, name: &[&str]) -> String {
    let len = name.iter().map(|n| n.len()).sum::<usize>();
    let mut key = String::with_capacity(8 + target_id.len() + len);
    key.push_str("cg:{t:");
    key.push_str(target_id);
    key.push_str("}:");
    name.iter().for_each(|n| key.push_str(n));
    key
}

/// The keys `retire.lua` checks and deletes: the fifteen target keys (under an op id no
/// operation uses), then the reusable answer's cache, lock, fence counter and followers.
pub fn retire_keys(target_id: &str) -> Vec<String> {
    let mut keys = target_keys(target_id, "retire").to_vec();
    keys.extend([
        shared(target_id),
        lead(target_id),
        fence(target_id),
        followers(target_id),
    ]);
    keys
}

/// What the durable hand-out prober writes and waits for on a target's slot (`durable.rs`).
pub fn probe(target_id: &str) -> String {
    target_key(target_id, &["probe"])
}

pub fn mbox(target_id: &str) -> String {
    target_key(target_id, &["mbox"])
}

pub fn mlease(target_id: &str) -> String {
    target_key(target_id, &["mlease"])
}

pub fn stats(target_id: &str) -> String {
    target_key(target_id, &["stats"])
}

pub fn wlease(target_id: &str) -> String {
    target_key(target_id, &["wlease"])
}

pub fn inflight(target_id: &str) -> String {
    target_key(target_id, &["inflight"])
}

pub fn pool(target_id: &str) -> String {
    target_key(target_id, &["pool"])
}

pub fn waiters(target_id: &str) -> String {
    target_key(target_id, &["waiters"])
}

/// The cached answer of a reusable target.
pub fn shared(target_id: &str) -> String {
    target_key(target_id, &["shared"])
}

/// The lock of the one task solving a reusable target.
pub fn lead(target_id: &str) -> String {
    target_key(target_id, &["lead"])
}

/// The fencing counter of a reusable target's lock.
pub fn fence(target_id: &str) -> String {
    target_key(target_id, &["fence"])
}

/// Waiters following a reusable target's task, each scored by its lease end. (A new name for
/// what was a plain set under `:followers`, so a fleet mid-upgrade gets no type errors.)
pub fn followers(target_id: &str) -> String {
    target_key(target_id, &["followed"])
}

/// Where other instances tell this one that mail arrived for its waiters.
pub fn inbox(instance: &str) -> String {
    format!("cg:{{i:{instance}}}:inbox")
}

/// Present while an instance is alive: set with its lease and a beat to live, every beat.
pub fn alive(instance: &str) -> String {
    format!("cg:{{i:{instance}}}:alive")
}

/// Every lease the fleet's instances run with: lease (ms) -> when an instance last said it runs
/// with it (ms). A few fields: one per distinct lease, not per instance.
pub const LEASES: &str = "cg:leases";

/// One task record of the compatible or native asynchronous API.
pub fn task(id: &str) -> String {
    format!("cg:{{k:{id}}}:task")
}

/// The Pub/Sub channel a finished task record's id is published on (`task_finish.lua`), so an
/// instance waiting on a task another one runs is woken instead of polling (a channel, not a key:
/// a Cluster forwards it to every node).
pub const TASKS_FINISHED: &str = "cg:tasks:finished";

/// One idempotency key's binding to its task; `scoped` is the tenant-scoped digest of the key
/// (hex), so a caller's characters never reach a key name.
pub fn idempotency(scoped: &str) -> String {
    format!("cg:{{d:{scoped}}}:idem")
}

/// Every live target id, for figures and sweeps (read with plain commands, never in a script);
/// ids leave it when `retire.lua` forgets the target.
pub fn targets() -> &'static str {
    "cg:targets"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part Redis Cluster hashes: the text between the first `{` and the next `}`.
    fn tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open..].find('}').unwrap() + open;
        &key[open + 1..close]
    }

    /// Key names are shared with every instance of a fleet, including one running the previous
    /// release during an upgrade: they never change by accident.
    #[test]
    fn key_names_are_stable() {
        let keys = target_keys("ab12", "o-7");
        assert_eq!(keys[0], "cg:{t:ab12}:pool");
        assert_eq!(keys[7], "cg:{t:ab12}:op:o-7");
        assert_eq!(keys[12], "cg:{t:ab12}:adopted");
        assert_eq!(followers("ab12"), "cg:{t:ab12}:followed");
        assert_eq!(probe("ab12"), "cg:{t:ab12}:probe");
    }

    #[test]
    fn every_key_of_a_target_shares_one_slot() {
        let id = "0123abcd";
        let mut all: Vec<String> = retire_keys(id);
        all.extend([
            shared(id),
            lead(id),
            fence(id),
            followers(id),
            wlease(id),
            inflight(id),
            pool(id),
            waiters(id),
        ]);
        for key in &all {
            assert_eq!(tag(key), "t:0123abcd", "{key}");
        }
        assert_eq!(tag(&inbox("abc")), "i:abc");
        assert_eq!(tag(&alive("abc")), "i:abc");
        assert_eq!(tag(&task("123")), "k:123");
        assert_eq!(tag(&idempotency("ab12")), "d:ab12");
    }
}

//! Every Redis key and channel of one queue (docs/QUEUE.md "Keys"). The `{NAME}` hash tag keeps
//! them in one Cluster slot, so each script may touch all of them.

/// The consumer group every worker reads through; KEDA's trigger names it too.
pub const GROUP: &str = "workers";

/// The names of one queue's keys.
#[derive(Debug, Clone)]
pub struct QueueKeys {
    prefix: String,
}

impl QueueKeys {
    pub fn new(name: &str) -> Self {
        Self {
            prefix: format!("cg:q:{{{name}}}"),
        }
    }

    /// The stream of tasks.
    pub fn tasks(&self) -> String {
        format!("{}:tasks", self.prefix)
    }

    /// The dead-letter stream.
    pub fn dead(&self) -> String {
        format!("{}:dead", self.prefix)
    }

    /// The retry schedule (score: due ms, member: the entry to add again).
    pub fn retry(&self) -> String {
        format!("{}:retry", self.prefix)
    }

    /// A producer's idempotency key, holding the task id it created.
    pub fn idem(&self, key: &str) -> String {
        format!("{}:idem:{key}", self.prefix)
    }

    /// The result of task `id`.
    pub fn result(&self, id: &str) -> String {
        format!("{}:result:{id}", self.prefix)
    }

    /// The channel a task id is published on once its result is written.
    pub fn done(&self) -> String {
        format!("{}:done", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = QueueKeys::new("captcha");
        assert_eq!(k.tasks(), "cg:q:{captcha}:tasks");
        assert_eq!(k.dead(), "cg:q:{captcha}:dead");
        assert_eq!(k.retry(), "cg:q:{captcha}:retry");
        assert_eq!(k.idem("a"), "cg:q:{captcha}:idem:a");
        assert_eq!(k.result("7"), "cg:q:{captcha}:result:7");
        assert_eq!(k.done(), "cg:q:{captcha}:done");
    }
}

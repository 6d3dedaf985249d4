//! Every key of the seed 003 list mode. The seed's producer knows `<prefix>:queue` and
//! `<prefix>:results` (prefix `captcha`, the default queue name) and its autoscaler
//! `<prefix>:queue_length`; the rest are ours. The names are the seed's, without a hash tag, so
//! they span Cluster slots: this mode needs a single Redis (checked at startup).

/// The key names of one seed-style queue.
#[derive(Debug, Clone)]
pub struct SeedKeys {
    prefix: String,
}

impl SeedKeys {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The list the producer `RPUSH`es entries to.
    pub fn queue(&self) -> String {
        format!("{}:queue", self.prefix)
    }

    /// The hash of results the producer `HGET`s by task id.
    pub fn results(&self) -> String {
        format!("{}:results", self.prefix)
    }

    /// Task ids by finish time (ms), so old results can be swept.
    pub fn results_index(&self) -> String {
        format!("{}:results:index", self.prefix)
    }

    /// The queue's length, as the seed's workers published it for its autoscaler.
    pub fn queue_length(&self) -> String {
        format!("{}:queue_length", self.prefix)
    }

    /// Live consumers, scored by their last beat (ms).
    pub fn consumers(&self) -> String {
        format!("{}:consumers", self.prefix)
    }

    /// The entries one consumer has taken and not finished.
    pub fn processing(&self, consumer: &str) -> String {
        format!("{}:processing:{consumer}", self.prefix)
    }

    /// Set when a consumer is taken for dead and its entries given back: its late finishes then
    /// write no result (`lua/seed_finish.lua`). Kept for the results' retention.
    pub fn taken_for_dead(&self, consumer: &str) -> String {
        format!("{}:dead:{consumer}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_prefix_gives_the_seeds_own_names() {
        let k = SeedKeys::new("captcha");
        assert_eq!(k.queue(), "captcha:queue");
        assert_eq!(k.results(), "captcha:results");
        assert_eq!(k.queue_length(), "captcha:queue_length");
        assert_eq!(k.processing("h-1"), "captcha:processing:h-1");
        assert_eq!(k.taken_for_dead("h-1"), "captcha:dead:h-1");
    }
}

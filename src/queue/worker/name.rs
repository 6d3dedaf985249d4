//! A consumer's name: `<hostname>-<16 hex random boot id>`, unique per process start, so a
//! restarted pod never inherits (and keeps alive) a dead predecessor's claims.

use rand::Rng;

/// The name for a consumer started now on the machine called `host` (the command reads it).
pub fn consumer_name(host: &str) -> String {
    let host: String = host
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(63)
        .collect();
    let host = if host.is_empty() {
        "worker".to_owned()
    } else {
        host
    };
    let boot: [u8; 8] = rand::rng().random();
    format!("{host}-{}", hex::encode(boot))
}

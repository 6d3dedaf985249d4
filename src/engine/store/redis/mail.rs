//! What travels through a waiter's mailbox: `A|<expires_at>|<answer json>` for an answer (the
//! scripts read the expiry, in Redis time, to pool or drop it without parsing JSON) or
//! `F|<failure json>`. The JSON's own times are the solving instance's; a taker restamps them
//! from the remaining life the script reports (`single::restamp`).

use crate::engine::{Delivery, SolveFailure};
use crate::model::Answer;

pub fn encode(delivery: &Delivery) -> String {
    match delivery {
        Ok(answer) => answer_mail(answer),
        Err(failure) => format!("F|{}", failure_json(failure)),
    }
}

/// A failure as the `F|` mail carries it.
pub fn failure_json(failure: &SolveFailure) -> String {
    serde_json::to_string(failure).unwrap_or_default()
}

pub fn answer_mail(answer: &Answer) -> String {
    format!("A|{}|{}", answer.expires_at, answer_json(answer))
}

/// The pool member form of an answer.
pub fn answer_json(answer: &Answer) -> String {
    // Serializing plain strings and integers cannot fail.
    serde_json::to_string(answer).unwrap_or_default()
}

pub fn decode(mail: &str) -> Option<Delivery> {
    if let Some(rest) = mail.strip_prefix("A|") {
        let (_, json) = rest.split_once('|')?;
        return serde_json::from_str::<Answer>(json).ok().map(Ok);
    }
    let json = mail.strip_prefix("F|")?;
    serde_json::from_str::<SolveFailure>(json).ok().map(Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_round_trips_and_garbage_is_none() {
        let a = Answer {
            text: "tok|with|pipes".into(),
            user_agent: Some("UA".into()),
            solved_at: 1,
            expires_at: 120_001,
            upstream: None,
        };
        assert_eq!(decode(&encode(&Ok(a.clone()))), Some(Ok(a)));
        let f = SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "x");
        assert_eq!(decode(&encode(&Err(f.clone()))), Some(Err(f)));
        for junk in ["", "A|", "A|12", "F|{", "X|1|{}"] {
            assert_eq!(decode(junk), None);
        }
    }
}

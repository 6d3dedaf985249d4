//! What travels through a waiter's mailbox: `A|<expires_at>|<answer json>` for an answer (the
//! scripts read the expiry, in Redis time, to pool or drop it without parsing JSON) or
//! `F|<failure json>`. The JSON's own times are relative (solved at 0, expiring after its
//! lifetime); a taker restamps them from the remaining life the script reports ([`restamp`]).
//! So one answer is one pool member, whichever instance wrote it and however often it went
//! round: an answer put back where a failover kept the original is found there, not doubled.

use crate::engine::{Delivery, SolveFailure};
use crate::model::{Answer, Millis};

/// The life an answer has left at `now` on this instance's clock, in ms (negative once expired).
/// Scripts stamp it with an expiry in Redis time, so instance clocks never meet.
pub fn remaining(answer: &Answer, now: Millis) -> i64 {
    let left = i128::from(answer.expires_at) - i128::from(now);
    i64::try_from(left).unwrap_or(if left < 0 { i64::MIN } else { i64::MAX })
}

/// An answer from Redis with `remaining_ms` of life left at `now`, restamped on this instance's
/// clock so its expiry and age read right wherever it is handed out.
pub fn restamp(mut answer: Answer, remaining_ms: i64, now: Millis) -> Answer {
    let expires = i128::from(now) + i128::from(remaining_ms);
    let shift = expires - i128::from(answer.expires_at);
    let moved = |t: Millis| u64::try_from((i128::from(t) + shift).max(0)).unwrap_or(u64::MAX);
    answer.solved_at = moved(answer.solved_at);
    answer.expires_at = moved(answer.expires_at);
    answer
}

/// A failure as the `F|` mail carries it.
pub fn failure_json(failure: &SolveFailure) -> String {
    serde_json::to_string(failure).unwrap_or_default()
}

/// The pool member (and mail) form of an answer: its identity (token, user agent, provider task,
/// lifetime) and no instance's clock, since every reader restamps its times anyway.
pub fn answer_json(answer: &Answer) -> String {
    let relative = Answer {
        solved_at: 0,
        expires_at: answer.expires_at.saturating_sub(answer.solved_at),
        ..answer.clone()
    };
    // Serializing plain strings and integers cannot fail.
    serde_json::to_string(&relative).unwrap_or_default()
}

pub fn decode(mail: &str) -> Option<Delivery> {
    if let Some((_, json)) = answer_parts(mail) {
        return serde_json::from_str::<Answer>(json).ok().map(Ok);
    }
    let json = mail.strip_prefix("F|")?;
    serde_json::from_str::<SolveFailure>(json).ok().map(Err)
}

/// An answer mail's expiry (Redis time) and answer; `None` for a failure mail or garbage.
pub fn decode_answer(mail: &str) -> Option<(u64, Answer)> {
    let (exp, json) = answer_parts(mail)?;
    Some((exp.parse().ok()?, serde_json::from_str(json).ok()?))
}

/// The expiry and JSON of an `A|` mail, unread.
fn answer_parts(mail: &str) -> Option<(&str, &str)> {
    mail.strip_prefix("A|")?.split_once('|')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mail as the scripts write it (`lua/lib/target.lua`, `shared_finish.lua`).
    fn encode(delivery: &Delivery) -> String {
        match delivery {
            Ok(answer) => format!("A|{}|{}", answer.expires_at, answer_json(answer)),
            Err(failure) => format!("F|{}", failure_json(failure)),
        }
    }

    #[test]
    fn mail_round_trips_and_garbage_is_none() {
        let a = Answer {
            text: "tok|with|pipes".into(),
            user_agent: Some("UA".into()),
            solved_at: 1,
            expires_at: 120_001,
            upstream: None,
        };
        let decoded = decode(&encode(&Ok(a.clone()))).unwrap().unwrap();
        assert_eq!(restamp(decoded, 100_000, 20_001), a);
        let f = SolveFailure::new("ERROR_CAPTCHA_UNSOLVABLE", "x");
        assert_eq!(decode(&encode(&Err(f.clone()))), Some(Err(f)));
        for junk in ["", "A|", "A|12", "F|{", "X|1|{}"] {
            assert_eq!(decode(junk), None);
        }
    }

    #[test]
    fn one_answer_is_one_member_however_often_it_was_restamped() {
        let a = Answer {
            text: "tok".into(),
            user_agent: None,
            solved_at: 1_000,
            expires_at: 121_000,
            upstream: None,
        };
        let elsewhere = restamp(a.clone(), 50_000, 9_999_999);
        assert_ne!(elsewhere.expires_at, a.expires_at);
        assert_eq!(answer_json(&elsewhere), answer_json(&a));
        let other = Answer {
            text: "tok2".into(),
            ..a.clone()
        };
        assert_ne!(answer_json(&other), answer_json(&a));
    }

    #[test]
    fn restamping_keeps_the_lifetime_and_moves_both_times() {
        let a = Answer {
            text: "t".into(),
            user_agent: None,
            solved_at: 1_000,
            expires_at: 121_000,
            upstream: None,
        };
        let now = 5_000_000;
        let b = restamp(a, 50_000, now);
        assert_eq!((b.solved_at, b.expires_at), (now - 70_000, now + 50_000));
        assert_eq!(remaining(&b, now), 50_000);
        // Far in the past or the future never wraps.
        assert_eq!(restamp(b.clone(), i64::MIN, now).expires_at, 0);
        assert_eq!(remaining(&b, u64::MAX), i64::MIN);
    }
}

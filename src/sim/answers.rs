//! What a simulated solve returns, per kind: verifiable tokens for reCAPTCHA, Turnstile,
//! Cloudflare and GeeTest; deterministic text for images and text captchas (same input, same
//! answer, as with a real provider's workers on a clean image); the price `get2` reports.
//!
//! Owns the shape of each kind's answer. Does not own token cryptography ([`TokenMint`]) or when
//! an answer becomes visible (the task table).

use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::clicks;
use super::tokens::TokenMint;
use crate::model::{
    Answer, AnswerShape, Check, Kind, Millis, Passthrough, SolveRequest, TaskParams,
};

/// The user agent bound to Enterprise and Cloudflare answers when the request sent none: a
/// current desktop Chrome, which is what real providers' solvers run.
pub const DEFAULT_USER_AGENT: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
     (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

/// Image answers are this long unless `min_len`/`max_len` say otherwise: the usual length of
/// classic text CAPTCHAs.
const IMAGE_ANSWER_LEN: usize = 6;
/// Longest image answer we produce, whatever `min_len` asks: one SHA-256 gives 32 characters.
const MAX_ANSWER_LEN: usize = 20;

/// Whether the simulator solves `req`: every declared kind, and of the types passed through
/// those the providers document (`model::kind::passthrough`); another name is refused as a
/// real provider refuses a type it does not have.
pub(crate) fn solves(req: &SolveRequest) -> bool {
    match &req.params {
        TaskParams::Passthrough(pass) => pass.label() != crate::model::UNLISTED,
        _ => true,
    }
}

/// The answer to `req`, ready at `ready_at` and valid for `lifetime` from then.
pub(crate) fn build(
    req: &SolveRequest,
    ready_at: Millis,
    lifetime: Duration,
    nonce: u64,
    mint: &TokenMint,
) -> Answer {
    let kind = req.kind();
    let token = || mint.mint(kind, ready_at, nonce).unwrap_or_default();
    let text = match &req.params {
        TaskParams::Recaptcha { .. } => token(),
        // A token, as text in `in.php` and as a `createTask` solution's `token`; the cells or
        // points to click where the type's answer is a list of them.
        TaskParams::Passthrough(Passthrough::InPhp { fields, files }) => {
            clicks::inphp_cells(fields, files).unwrap_or_else(token)
        }
        TaskParams::Passthrough(Passthrough::TaskApi { task }) => clicks::task_solution(task)
            .unwrap_or_else(|| json!({ "token": token() }))
            .to_string(),
        // What a person typed: a picture's text, or a question's answer, each a function of
        // everything asked.
        TaskParams::Declared { values, .. } if !kind.spec().typical.token => {
            let picture = kind.spec().declared_params().iter();
            if picture.clone().any(|p| p.check == Check::Image) {
                picture_text(values)
            } else {
                words(values)
            }
        }
        TaskParams::Declared { values, .. } => match kind.spec().answer {
            AnswerShape::AsGiven => token(),
            // What a real answer carries beside the token (hCaptcha's `respKey`), unique per
            // task, kept as the gateway keeps it.
            shape @ AnswerShape::Token { extras, .. } => {
                let token = token();
                if extras.is_empty() {
                    token
                } else {
                    let beside = extras
                        .iter()
                        .map(|key| ((*key).to_owned(), format!("{key}-{nonce:016x}").into()));
                    let mut stored =
                        serde_json::Map::from_iter([("token".to_owned(), token.into())]);
                    stored.extend(beside);
                    shape.canonical(serde_json::Value::Object(stored).to_string())
                }
            }
            AnswerShape::Points { .. } => clicks::declared_points(values),
            // The first key holds the verifiable token; the others are what a real answer
            // pairs it with (Lemin's `challenge_id`): as the request sent it (GeeTest's
            // `challenge`, v4's `captcha_id`), else unique per task. Each key is also under
            // every provider's spelling of it (2captcha's `geetest_validate`).
            shape @ AnswerShape::Object { keys, .. } => {
                let object: serde_json::Map<String, serde_json::Value> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, key)| {
                        let value = match req.params.declared(key) {
                            _ if i == 0 => token(),
                            Some(sent) => sent.to_owned(),
                            None => format!("{key}-{nonce:016x}"),
                        };
                        ((*key).to_owned(), value.into())
                    })
                    .collect();
                shape.canonical(serde_json::Value::Object(object).to_string())
            }
        },
    };
    let user_agent = req.answer_has_user_agent().then(|| {
        req.user_agent
            .clone()
            .unwrap_or_else(|| DEFAULT_USER_AGENT.to_owned())
    });
    Answer {
        text,
        user_agent,
        solved_at: ready_at,
        expires_at: ready_at.saturating_add(lifetime.as_millis() as Millis),
        upstream: None,
    }
}

/// What `get2` reports as the task's price, in the account currency (2captcha's list prices).
pub(crate) fn price(kind: Kind) -> &'static str {
    kind.spec().typical.price
}

/// A picture's text: characters drawn from a hash of the picture and every hint sent, shaped
/// by the hints as a worker would read them (2captcha's names): `numeric` 1 digits, 2 letters,
/// 3 one or the other, 4 both; `calc` a number; `regsense` mixed case; `phrase` two words;
/// `min_len`/`max_len` its length.
fn picture_text(values: &[(&'static str, String)]) -> String {
    let digest = digest_of(values);
    let hint = |name: &str| {
        values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    };
    let number = |name: &str| hint(name).and_then(|v| v.parse::<usize>().ok());
    let min = number("min_len").map_or(1, |n| n.clamp(1, MAX_ANSWER_LEN));
    let max = number("max_len").map_or(MAX_ANSWER_LEN, |n| n.clamp(min, MAX_ANSWER_LEN));
    let len = IMAGE_ANSWER_LEN.clamp(min, max);

    const DIGITS: &[u8] = b"0123456789";
    const LOWER: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
    const MIXED: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const LOWER_ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    const MIXED_ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let numeric = match number("numeric") {
        // One or the other: the hash picks which.
        Some(3) => 1 + usize::from(digest[31] % 2),
        n => n.unwrap_or(0),
    };
    let cased = hint("regsense").is_some();
    let alphabet = match (hint("calc").is_some() || numeric == 1, numeric, cased) {
        (true, _, _) => DIGITS,
        (false, 2, false) => LOWER,
        (false, 2, true) => MIXED,
        (false, _, false) => LOWER_ALNUM,
        (false, _, true) => MIXED_ALNUM,
    };
    let mut text: Vec<u8> = digest
        .iter()
        .take(len)
        .map(|b| alphabet[*b as usize % alphabet.len()])
        .collect();
    // Digits and letters both: the first a letter, the last a digit.
    if numeric == 4 && len > 1 && alphabet.len() > DIGITS.len() {
        text[0] = LOWER[digest[0] as usize % LOWER.len()];
        text[len - 1] = DIGITS[digest[len - 1] as usize % DIGITS.len()];
    }
    let mut text = String::from_utf8(text).unwrap_or_default();
    if hint("phrase").is_some() && len > 1 {
        text.insert(len / 2, ' ');
    }
    // A mixed-case answer could spell the one substring clients treat as an error.
    if text.contains("ERROR") {
        text = text.to_lowercase();
    }
    text
}

/// A hash of every value asked, each apart from the next.
fn digest_of(values: &[(&'static str, String)]) -> [u8; 32] {
    let mut h = Sha256::new();
    for (_, value) in values {
        h.update(value.trim().as_bytes());
        h.update([0]);
    }
    h.finalize().into()
}

/// A lowercase word of 4-8 letters drawn from a hash of the question.
fn words(values: &[(&'static str, String)]) -> String {
    let digest = digest_of(values);
    let len = 4 + (digest[0] % 5) as usize;
    digest[1..=len]
        .iter()
        .map(|b| char::from(b'a' + b % 26))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_answers_follow_their_hints() {
        let image = |body: &str, hints: &[(&'static str, &str)]| {
            let mut values = vec![("body", body.to_owned())];
            values.extend(hints.iter().map(|(n, v)| (*n, (*v).to_owned())));
            picture_text(&values)
        };
        let img = "R0lGODlhc29tZSBwaXhlbHM=";
        let plain = image(img, &[]);
        assert_eq!(plain, image(img, &[]));
        assert_eq!(plain.len(), IMAGE_ANSWER_LEN);
        assert_ne!(plain, image("R0lGODlhb3RoZXIgcGl4ZWxz", &[]));

        let digits = image(img, &[("numeric", "1")]);
        assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{digits}");
        let letters = image(img, &[("numeric", "2")]);
        assert!(letters.bytes().all(|b| b.is_ascii_lowercase()), "{letters}");
        let either = image(img, &[("numeric", "3")]);
        let alone = |t: &str| {
            t.bytes().all(|b| b.is_ascii_digit()) || t.bytes().all(|b| b.is_ascii_lowercase())
        };
        assert!(alone(&either), "{either}");
        for body in [
            "R0lGODlhYQ==",
            "R0lGODlhYg==",
            "R0lGODlhYw==",
            "R0lGODlhZA==",
        ] {
            let both = image(body, &[("numeric", "4")]);
            assert!(both.bytes().any(|b| b.is_ascii_digit()), "{both}");
            assert!(both.bytes().any(|b| b.is_ascii_alphabetic()), "{both}");
        }
        let long = image(img, &[("min_len", "9"), ("max_len", "12")]);
        assert_eq!(long.len(), 9);
        let short = image(img, &[("max_len", "3")]);
        assert_eq!(short.len(), 3);
        let absurd = image(img, &[("min_len", "4294967295")]);
        assert_eq!(absurd.len(), MAX_ANSWER_LEN);
        let phrase = image(img, &[("phrase", "1")]);
        assert!(phrase.contains(' '), "{phrase}");
    }

    #[test]
    fn text_answers_are_deterministic_words() {
        let ask = |q: &str| words(&[("textcaptcha", q.to_owned())]);
        let a = ask("What colour is the sky?");
        assert_eq!(a, ask("What colour is the sky?"));
        assert!((4..=8).contains(&a.len()) && a.bytes().all(|b| b.is_ascii_lowercase()));
        assert_ne!(a, ask("What colour is grass?"));
    }
}

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
    Answer, AnswerShape, ImageOptions, Kind, Millis, Passthrough, SolveRequest, TaskParams,
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
        TaskParams::Image { body, options } => image_text(body, options),
        TaskParams::Recaptcha { .. } => token(),
        // A token, as text in `in.php` and as a `createTask` solution's `token`; the cells or
        // points to click where the type's answer is a list of them.
        TaskParams::Passthrough(Passthrough::InPhp { fields, files }) => {
            clicks::inphp_cells(fields, files).unwrap_or_else(token)
        }
        TaskParams::Passthrough(Passthrough::TaskApi { task }) => clicks::task_solution(task)
            .unwrap_or_else(|| json!({ "token": token() }))
            .to_string(),
        // Words a person typed (a question's answer): a function of everything asked.
        TaskParams::Declared { values, .. } if !kind.spec().typical.token => words(values),
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

/// Characters drawn from a hash of the image and every option that changes a real answer.
fn image_text(body: &[u8], o: &ImageOptions) -> String {
    let mut h = Sha256::new();
    h.update(body);
    h.update(format!("{o:?}").as_bytes());
    let digest = h.finalize();

    let min = o.min_len.map_or(1, |n| n as usize).clamp(1, MAX_ANSWER_LEN);
    let max = o
        .max_len
        .map_or(MAX_ANSWER_LEN, |n| n as usize)
        .clamp(min, MAX_ANSWER_LEN);
    let len = IMAGE_ANSWER_LEN.clamp(min, max);

    const DIGITS: &[u8] = b"0123456789";
    const LOWER: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
    const MIXED: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const LOWER_ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    const MIXED_ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    // `numeric`: 1 digits only, 2 letters only, 4 no digits; `calc` answers are numbers.
    let alphabet = match (o.calc || o.numeric == 1, o.numeric, o.case_sensitive) {
        (true, _, _) => DIGITS,
        (false, 2 | 4, false) => LOWER,
        (false, 2 | 4, true) => MIXED,
        (false, _, false) => LOWER_ALNUM,
        (false, _, true) => MIXED_ALNUM,
    };
    let mut text: String = digest
        .iter()
        .take(len)
        .map(|b| char::from(alphabet[*b as usize % alphabet.len()]))
        .collect();
    if o.phrase && len > 1 {
        text.insert(len / 2, ' ');
    }
    // A mixed-case answer could spell the one substring clients treat as an error.
    if text.contains("ERROR") {
        text = text.to_lowercase();
    }
    text
}

/// A lowercase word of 4-8 letters drawn from a hash of the question.
fn words(values: &[(&'static str, String)]) -> String {
    let mut h = Sha256::new();
    for (_, value) in values {
        h.update(value.trim().as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    let len = 4 + (digest[0] % 5) as usize;
    digest[1..=len]
        .iter()
        .map(|b| char::from(b'a' + b % 26))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(f: impl FnOnce(&mut ImageOptions)) -> ImageOptions {
        let mut o = ImageOptions::default();
        f(&mut o);
        o
    }

    #[test]
    fn image_answers_follow_their_options() {
        let img = b"GIF89a some pixels";
        let plain = image_text(img, &ImageOptions::default());
        assert_eq!(plain, image_text(img, &ImageOptions::default()));
        assert_eq!(plain.len(), IMAGE_ANSWER_LEN);
        assert_ne!(
            plain,
            image_text(b"GIF89a other pixels", &ImageOptions::default())
        );

        let digits = image_text(img, &opts(|o| o.numeric = 1));
        assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{digits}");
        let letters = image_text(img, &opts(|o| o.numeric = 2));
        assert!(letters.bytes().all(|b| b.is_ascii_lowercase()), "{letters}");
        let long = image_text(
            img,
            &opts(|o| {
                o.min_len = Some(9);
                o.max_len = Some(12)
            }),
        );
        assert_eq!(long.len(), 9);
        let short = image_text(img, &opts(|o| o.max_len = Some(3)));
        assert_eq!(short.len(), 3);
        let absurd = image_text(img, &opts(|o| o.min_len = Some(u32::MAX)));
        assert_eq!(absurd.len(), MAX_ANSWER_LEN);
        let phrase = image_text(img, &opts(|o| o.phrase = true));
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

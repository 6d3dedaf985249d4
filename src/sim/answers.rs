//! What a simulated solve returns, per kind: verifiable tokens for reCAPTCHA, Turnstile,
//! Cloudflare and GeeTest; deterministic text for images and text captchas (same input, same
//! answer, as with a real provider's workers on a clean image); the price `get2` reports.
//!
//! Owns the shape of each kind's answer. Does not own token cryptography ([`TokenMint`]) or when
//! an answer becomes visible (the task table).

use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

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
        TaskParams::Geetest { challenge, .. } => {
            let validate = token();
            // Real seccodes are `<validate>|jordan`; `|` is not allowed in plain answers
            // (docs/PROTOCOL.md item 5), so `-` stands in for it.
            let seccode = format!("{validate}-jordan");
            json!({
                "geetest_challenge": challenge,
                "geetest_validate": validate,
                "geetest_seccode": seccode,
                "challenge": challenge,
                "validate": validate,
                "seccode": seccode,
            })
            .to_string()
        }
        TaskParams::Image { body, options } => image_text(body, options),
        TaskParams::Text { text, lang } => text_answer(text, lang.as_deref()),
        TaskParams::Recaptcha { .. }
        | TaskParams::Turnstile { .. }
        | TaskParams::CloudflareChallenge { .. } => token(),
        // A token, as text in `in.php` and as a `createTask` solution's `token`; the cells to
        // click where the type's answer is a list of them.
        TaskParams::Passthrough(Passthrough::InPhp { fields, files }) => {
            cells_to_click(fields, files).unwrap_or_else(token)
        }
        TaskParams::Passthrough(Passthrough::TaskApi { .. }) => {
            json!({ "token": token() }).to_string()
        }
        TaskParams::Declared { .. } => match kind.spec().answer {
            AnswerShape::Token { .. } | AnswerShape::AsGiven => token(),
            // The first key holds the verifiable token; the others are what a real answer
            // pairs it with (Lemin's `challenge_id`): as the request sent it (GeeTest v4's
            // `captcha_id`), else unique per task.
            AnswerShape::Object { keys, .. } => {
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
                serde_json::Value::Object(object).to_string()
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

/// Most cells a grid may have: a 10x10 grid, well beyond reCAPTCHA's 4x4.
const MAX_CELLS: u32 = 100;

/// CaptchaAI's grid (an image with `grid_size=RxC`) and BLS (`method=bls`, nine images)
/// answers: a JSON array of the cells to click, numbered from 1 at the top left (CaptchaAI's SDK
/// reads the answer as JSON; 2captcha's grid docs number cells so too), drawn from a hash of
/// everything sent, so the same task gets the same cells, as with a real worker. `None` for any
/// other type.
fn cells_to_click(fields: &[(String, String)], files: &[(String, bytes::Bytes)]) -> Option<String> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let cells = match field("method") {
        Some("bls") => 9,
        _ => {
            let (rows, cols) = field("grid_size")?.split_once(['x', 'X'])?;
            let (rows, cols) = (
                rows.trim().parse::<u32>().ok()?,
                cols.trim().parse::<u32>().ok()?,
            );
            rows.checked_mul(cols)
                .filter(|n| (1..=MAX_CELLS).contains(n))?
        }
    };
    let mut h = Sha256::new();
    for (name, value) in fields {
        h.update(name.as_bytes());
        h.update(value.as_bytes());
    }
    for (name, body) in files {
        h.update(name.as_bytes());
        h.update(body);
    }
    let digest = h.finalize();
    // About a third of the cells, never none.
    let mut chosen: Vec<u32> = (1..=cells)
        .filter(|c| digest[(*c as usize) % digest.len()].wrapping_add(*c as u8) % 3 == 0)
        .collect();
    if chosen.is_empty() {
        chosen.push(1 + u32::from(digest[0]) % cells);
    }
    Some(serde_json::to_string(&chosen).unwrap_or_default())
}

/// What `get2` reports as the task's price, in the account currency (2captcha's list prices).
pub(crate) fn price(kind: Kind) -> &'static str {
    match kind {
        Kind::RecaptchaV2 | Kind::RecaptchaV3 | Kind::GeetestV3 => "0.00299",
        Kind::Turnstile | Kind::CloudflareChallenge => "0.00145",
        Kind::Image | Kind::Text => "0.0005",
        _ => "0.00299",
    }
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
fn text_answer(question: &str, lang: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(question.trim().as_bytes());
    h.update([0]);
    h.update(lang.unwrap_or("").as_bytes());
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
        let a = text_answer("What colour is the sky?", None);
        assert_eq!(a, text_answer("What colour is the sky?", None));
        assert!((4..=8).contains(&a.len()) && a.bytes().all(|b| b.is_ascii_lowercase()));
        assert_ne!(a, text_answer("What colour is grass?", None));
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn cells(answer: &str) -> Vec<u32> {
        serde_json::from_str(answer).expect("a JSON array of cells")
    }

    #[test]
    fn grid_and_bls_answers_are_cells_inside_the_grid_the_same_for_the_same_task() {
        let grid = |size: &str, body: &str| {
            let fields = pairs(&[("method", "base64"), ("grid_size", size), ("body", body)]);
            cells_to_click(&fields, &[]).unwrap()
        };
        for (size, n) in [("3x3", 9), ("4x4", 16), ("2X5", 10)] {
            for body in ["aW1hZ2Ux", "aW1hZ2Uy", "aW1hZ2Uz"] {
                let got = cells(&grid(size, body));
                assert!(!got.is_empty(), "{size}");
                assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
                assert!(got.iter().all(|c| (1..=n).contains(c)), "{size}: {got:?}");
                assert_eq!(
                    got,
                    cells(&grid(size, body)),
                    "the same task, the same cells"
                );
            }
        }
        let bls: Vec<(String, String)> = pairs(&[("method", "bls"), ("instructions", "123")]);
        let got = cells(&cells_to_click(&bls, &[]).unwrap());
        assert!(got.iter().all(|c| (1..=9).contains(c)), "{got:?}");
        // Any other type, and a grid size that is no grid, keep the token.
        for fields in [
            pairs(&[("method", "keycaptcha")]),
            pairs(&[("method", "base64"), ("grid_size", "0x3")]),
            pairs(&[("method", "base64"), ("grid_size", "99x99")]),
            pairs(&[("method", "base64"), ("grid_size", "big")]),
        ] {
            assert_eq!(cells_to_click(&fields, &[]), None, "{fields:?}");
        }
    }
}

//! The provider reply reader: any status and body, for both protocol families, and `ids=` batch
//! answers split against any id count.
//!
//! Input: byte 0 picks the family, bytes 1-2 the HTTP status (big-endian, mod 600), byte 3 the
//! batch size (mod 101, the poller's largest batch is 100); the rest is the body.
#![no_main]

use captcha_gateway::provider::{UpstreamReply, parse_reply, split_batch};
use captcha_gateway::wire::inphp::InPhpDialect;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let family = if data[0] & 1 == 0 {
        InPhpDialect::CaptchaAi
    } else {
        InPhpDialect::TwoCaptcha
    };
    let status = u16::from_be_bytes([data[1], data[2]]) % 600;
    let batch = usize::from(data[3]) % 101;
    let body = String::from_utf8_lossy(&data[4..]);
    let reply = parse_reply(family, status, &body);
    if let UpstreamReply::Ok { request, .. } = &reply {
        if let Some(outcomes) = split_batch(request, batch, family) {
            assert_eq!(outcomes.len(), batch);
        }
    }
    let _ = reply.into_outcome();
    let _ = split_batch(&body, batch, family);
});

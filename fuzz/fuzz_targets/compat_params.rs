//! The compatible API's parameter reader and `in.php` parser over every encoding.
//!
//! Input: `QUERY\nCONTENT-TYPE\nBODY` (the first two lines may be empty; an empty query line
//! means no query string, an empty content-type line means no `Content-Type` header). Whatever
//! parses must also survive what the gateway does next with a request: its target key and label
//! under both URL policies, and its encoding as upstream `in.php` parameters.
#![no_main]

use bytes::Bytes;
use captcha_gateway::model::{Target, TargetPolicy};
use captcha_gateway::wire::inphp::{Mode, Params, Reply, parse_submit, submit_params};
use libfuzzer_sys::fuzz_target;

fn split_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

fuzz_target!(|data: &[u8]| {
    let (query, rest) = split_line(data);
    let (content_type, body) = split_line(rest);
    let query = String::from_utf8_lossy(query);
    let content_type = String::from_utf8_lossy(content_type);
    let params = futures::executor::block_on(Params::read(
        Some(query.as_ref()).filter(|q| !q.is_empty()),
        Some(content_type.as_ref()).filter(|c| !c.is_empty()),
        Bytes::copy_from_slice(body),
    ));
    let mode = Mode::from_json_flag(params.wants_json());
    match parse_submit(&params) {
        Ok(req) => {
            for drop_query in [true, false] {
                let target = Target::of(&req, TargetPolicy { drop_query });
                assert!(!target.id.is_empty());
            }
            let _ = submit_params(&req);
            let _ = req.validate();
        }
        Err(v) => {
            assert!(
                v.code.starts_with("ERROR_"),
                "not a protocol code: {}",
                v.code
            );
            let reply = Reply::error(mode, v.code);
            assert!(reply.body_text().contains(v.code));
        }
    }
});

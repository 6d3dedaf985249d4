//! The native API's JSON body parser (`POST /v1/solve`, `/v1/tasks`, `/v1/pools/tokens`).
//!
//! Input: the raw body. A body that parses must survive what the gateway does next with it
//! (target key and label, upstream encoding); one that does not must name a non-empty code.
#![no_main]

use captcha_gateway::http::parse_native_body;
use captcha_gateway::model::{Target, TargetPolicy};
use captcha_gateway::wire::inphp::submit_params;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_native_body(data) {
        Ok(req) => {
            for drop_query in [true, false] {
                let _ = Target::of(&req, TargetPolicy { drop_query });
            }
            let _ = submit_params(&req);
        }
        Err(code) => assert!(!code.is_empty()),
    }
});

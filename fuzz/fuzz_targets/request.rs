//! Any bytes as a control request line: decoded or refused with a reason, never a panic; what
//! decodes re-encodes to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slaswitch::protocol::parse_request;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    match parse_request(&line) {
        Ok(req) => {
            let again = serde_json::to_string(&req).expect("a request encodes");
            assert_eq!(parse_request(&again).expect("its encoding decodes"), req);
        }
        Err(e) => assert!(e.to_string().starts_with("bad request:"), "{e}"),
    }
});

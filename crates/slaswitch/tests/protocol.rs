//! The control socket's request decoder under hostile input: any bytes, and valid requests
//! mutated at random, are decoded or refused with a reason; nothing panics, and a request
//! never carries a field the decoder does not know.

use proptest::prelude::*;
use slaswitch::protocol::parse_request;

const VALID: &[&str] = &[
    r#"{"cmd":"add-port","name":"vm1","port_type":"vhost-user","options":{"bandwidth_bps":"1G"}}"#,
    r#"{"cmd":"set-port","ports":[{"name":"vm1","options":{"priority":"1"}}]}"#,
    r#"{"cmd":"del-flows","matcher":"in_port=1","strict":true}"#,
    r#"{"cmd":"pmd-stats"}"#,
    r#"{"cmd":"set-tenant","name":"t1","weight":3}"#,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn any_line_is_decoded_or_refused_with_a_reason(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let line = String::from_utf8_lossy(&bytes);
        if let Err(e) = parse_request(&line) {
            prop_assert!(e.to_string().starts_with("bad request:"), "{}", e);
        }
    }

    #[test]
    fn mutated_requests_are_decoded_or_refused(which in 0..VALID.len(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut bytes = VALID[which].as_bytes().to_vec();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let line = String::from_utf8_lossy(&bytes);
        match parse_request(&line) {
            Ok(req) => {
                // What decodes re-encodes to a request that decodes the same.
                let again = serde_json::to_string(&req).unwrap();
                prop_assert_eq!(parse_request(&again).unwrap(), req);
            }
            Err(e) => prop_assert!(e.to_string().starts_with("bad request:"), "{}", e),
        }
    }
}

#[test]
fn unknown_fields_and_commands_are_refused() {
    for bad in [
        r#"{"cmd":"pmd-stats","extra":1}"#,
        r#"{"cmd":"set-port","ports":[{"name":"vm1","options":{},"evil":true}]}"#,
        r#"{"cmd":"format-disk"}"#,
        r#"{"cmd":"set-tenant","name":"t1","weight":-1}"#,
        r#"{"cmd":"set-tenant","name":"t1","weight":1e400}"#,
    ] {
        let e = parse_request(bad).unwrap_err();
        assert!(e.to_string().starts_with("bad request:"), "{bad}: {e}");
    }
}

//! Wire decoding: every decoder in `jaque_core::wire` on the same arbitrary bytes.
//!
//! Checked: each decoder returns a value or an error, never panics; whatever decodes re-encodes to bytes that
//! decode to the same value, and encoding is stable (encode(decode(encode(x))) == encode(x)); error messages
//! format; a snapshot decodes alike whole and read as it comes; a decoded log entry can be read by a
//! `LogReader`, a decoded command's definition validated. Bytes on a command subject get an answer: a command,
//! or the core's `rejection`, which is `rejected` with a non-empty reason (naming the line and column for JSON
//! that does not parse or fit) that survives the wire. A request (`decode_request`) is the command the same bytes
//! decode to, with a claim that survives the wire; an engine's answer (`decode_answer`: a claim, a decline or an
//! outcome) survives it too.

use jaque_core::wire::{self, Heartbeat, WireError};
use jaque_core::{EventBody, LogEntry, LogReader, Outcome};
use std::fmt::Debug;

fn round_trip<T, D>(what: &str, data: &[u8], decode: D) -> Option<T>
where
    T: serde::Serialize + PartialEq + Debug,
    D: Fn(&[u8]) -> Result<T, WireError>,
{
    match decode(data) {
        Ok(value) => {
            let bytes = wire::encode(&value);
            let again = match decode(&bytes) {
                Ok(v) => v,
                Err(e) => panic!("{what}: {value:?} encodes to {:?}, which does not decode: {e}", show(&bytes)),
            };
            assert_eq!(again, value, "{what}: decode(encode(x)) != x");
            assert_eq!(wire::encode(&again), bytes, "{what}: encoding is not stable");
            Some(value)
        }
        Err(e) => {
            let _ = e.to_string();
            None
        }
    }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What an engine answers to bytes that are not a command.
fn check_rejection(data: &[u8], e: &WireError) {
    let outcome = wire::rejection(e);
    let Outcome::Rejected { reason } = &outcome else {
        panic!("{:?} is answered {outcome:?}, not rejected", show(data));
    };
    assert!(!reason.trim().is_empty(), "{:?} is rejected without a reason", show(data));
    if matches!(e, WireError::Malformed { .. }) {
        assert!(reason.contains(" line ") && reason.contains(" column "), "{reason:?} names no position");
    }
    let answer = wire::encode(&outcome);
    assert_eq!(wire::decode_outcome(&answer).expect("a rejection decodes"), outcome);
}

pub fn check(data: &[u8]) {
    match wire::decode_command(data) {
        Ok(_) => {
            let cmd = round_trip("command", data, wire::decode_command).expect("it decoded once");
            assert!(cmd.hop <= 1, "a command with hop {} decoded", cmd.hop);
            if let EventBody::Put { def } = EventBody::from_command(&cmd.kind) {
                if let Err(e) = def.validate() {
                    let _ = e.to_string();
                }
            }
            let _ = cmd.kind.name();
        }
        Err(e) => check_rejection(data, &e),
    }
    // The same bytes as a request that may ask for a claim: the same command, or the same kind of error.
    match (wire::decode_request(data), wire::decode_command(data)) {
        (Ok(r), Ok(cmd)) => {
            assert_eq!(r.cmd, cmd, "decode_request and decode_command disagree");
            if r.claim {
                let bytes = wire::encode_claim_request(&r.cmd);
                assert_eq!(wire::decode_request(&bytes).expect("a claim request decodes"), r);
            }
        }
        (Err(e), Err(_)) => check_rejection(data, &e),
        (Err(e), Ok(cmd)) => {
            // Only a claim asked on a forward is a request error the command alone does not have.
            assert_eq!(cmd.hop, 1, "{:?} decodes as a command but not as a request: {e}", show(data));
            check_rejection(data, &e);
        }
        (Ok(r), Err(e)) => panic!("{:?} decodes as a request ({r:?}) but not as a command: {e}", show(data)),
    }
    round_trip("outcome", data, wire::decode_outcome);
    // An engine's answer on a reply subject: a claim, a decline or an outcome, stable through the wire.
    if let Ok(answer) = wire::decode_answer(data) {
        let bytes = wire::encode_answer(&answer);
        let again = wire::decode_answer(&bytes).unwrap_or_else(|e| panic!("{answer:?} re-encodes badly: {e}"));
        assert_eq!(again, answer, "decode_answer(encode_answer(x)) != x");
        assert_eq!(wire::encode_answer(&again), bytes, "answer encoding is not stable");
    }
    if let Some(entry) = round_trip("log entry", data, wire::decode_log_entry) {
        if let LogEntry::Epoch(r) = &entry {
            assert!(r.members.windows(2).all(|w| w[0].id < w[1].id), "unsorted epoch record decoded");
        }
        let mut reader = LogReader::new();
        let _ = reader.read(1, &entry);
        let _ = reader.read(1, &entry);
    }
    // A snapshot: a reader or an error, never a panic; a decoded one survives the wire unchanged. Read as it
    // comes (as a reader starting from the store reads it), the same bytes give the same reader or an error too.
    let decoded = wire::decode_snapshot(data);
    match (&decoded, wire::read_snapshot(data)) {
        (Ok(a), Ok(b)) => assert!(*a == b, "a snapshot read as it comes is not the one decoded whole"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("decoded whole {:?}, read as it comes {:?}", a.is_ok(), b.is_ok()),
    }
    if let Ok(reader) = decoded {
        let bytes = wire::encode_snapshot(&reader.snapshot());
        let again = wire::decode_snapshot(&bytes).unwrap_or_else(|e| panic!("a snapshot re-encodes badly: {e}"));
        assert!(again == reader, "decode(encode(snapshot)) != snapshot");
    }
    round_trip("check work", data, wire::decode_check_work);
    round_trip("check result", data, wire::decode_check_result);

    // A heartbeat's member id comes from the key; try a fixed good id and the input itself as one.
    let as_id = String::from_utf8_lossy(&data[..data.len().min(80)]).into_owned();
    for id in ["e1", as_id.as_str()] {
        if let Ok((m, format)) = wire::decode_heartbeat(id, data) {
            assert_eq!(m.id.as_str(), id);
            let bytes = wire::encode(&Heartbeat { incarnation: m.incarnation, format });
            assert_eq!(wire::decode_heartbeat(id, &bytes).expect("an encoded heartbeat decodes"), (m, format));
        }
    }
}

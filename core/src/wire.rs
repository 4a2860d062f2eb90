//! The bytes of every message the shell sends and receives: commands (ingress and forwards), their outcomes,
//! heartbeat values, log entries, check work and results. JSON, so an operator can read them with
//! `nats sub`. Decoding never panics: garbage is an error the caller counts and skips.

use crate::engine::{CheckResult, CheckWork};
use crate::model::{Command, LogEntry, MemberId, MemberRef, Outcome};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Larger messages are refused before parsing.
pub const MAX_MESSAGE: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("message of {0} bytes is larger than the {MAX_MESSAGE}-byte limit")]
    TooLarge(usize),
    #[error("malformed {what}: {source}")]
    Malformed { what: &'static str, source: serde_json::Error },
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
}

fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, WireError> {
    if bytes.len() > MAX_MESSAGE {
        return Err(WireError::TooLarge(bytes.len()));
    }
    serde_json::from_slice(bytes).map_err(|source| WireError::Malformed { what, source })
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("jaque's wire types always serialize")
}

/// A command from `jaque.work.cmd.ingress` (hop 0) or `jaque.cmd.<engine-id>` (hop 1).
pub fn decode_command(bytes: &[u8]) -> Result<Command, WireError> {
    let cmd: Command = decode("command", bytes)?;
    if cmd.hop > 1 {
        return Err(WireError::Invalid { what: "command", reason: format!("hop {} (at most 1)", cmd.hop) });
    }
    Ok(cmd)
}

pub fn decode_outcome(bytes: &[u8]) -> Result<Outcome, WireError> {
    decode("outcome", bytes)
}

pub fn decode_log_entry(bytes: &[u8]) -> Result<LogEntry, WireError> {
    let entry: LogEntry = decode("log entry", bytes)?;
    if let LogEntry::Epoch(r) = &entry {
        if !r.members.windows(2).all(|w| w[0].id < w[1].id) {
            return Err(WireError::Invalid { what: "epoch record", reason: "members not sorted by unique id".into() });
        }
    }
    Ok(entry)
}

pub fn decode_check_work(bytes: &[u8]) -> Result<CheckWork, WireError> {
    decode("check work", bytes)
}

pub fn decode_check_result(bytes: &[u8]) -> Result<CheckResult, WireError> {
    decode("check result", bytes)
}

/// The value of a membership key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub incarnation: u64,
}

/// A membership key's value, with the member id taken from the key.
pub fn decode_heartbeat(id: &str, bytes: &[u8]) -> Result<MemberRef, WireError> {
    let hb: Heartbeat = decode("heartbeat", bytes)?;
    let id = MemberId::new(id).map_err(|e| WireError::Invalid { what: "heartbeat key", reason: e.to_string() })?;
    Ok(MemberRef { id, incarnation: hb.incarnation })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    #[test]
    fn command_round_trips() {
        let cmd = Command {
            id: CommandId::new("c-1").unwrap(),
            object: ObjectId::new("web").unwrap(),
            kind: CommandKind::Put {
                def: ObjectDef {
                    probe: Probe::Http { url: "http://127.0.0.1:1/".into(), expect_status: None },
                    interval_ms: 30_000,
                    timeout_ms: 5_000,
                },
            },
            hop: 0,
        };
        assert_eq!(decode_command(&encode(&cmd)).unwrap(), cmd);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [&b""[..], b"{", b"null", b"{\"id\":\"a b\",\"object\":\"x\",\"kind\":\"delete\"}", &[0xff, 0xfe]]
        {
            assert!(decode_command(bytes).is_err());
            assert!(decode_log_entry(bytes).is_err());
            assert!(decode_heartbeat("a", bytes).is_err());
        }
    }

    #[test]
    fn a_second_hop_is_refused_on_the_wire() {
        let bytes = br#"{"id":"c","object":"x","kind":"delete","hop":2}"#;
        assert!(matches!(decode_command(bytes), Err(WireError::Invalid { .. })));
    }
}

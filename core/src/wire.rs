//! The bytes of every message the shell sends and receives: commands (ingress and forwards), their outcomes,
//! heartbeat values, log entries, check work and results. JSON, so an operator can read them with
//! `nats sub`. Decoding never panics: garbage is an error the caller counts and skips, and for a request on a
//! command subject also answers with [`rejection`]. `docs/wire.md` is this format for clients; a test here
//! keeps its examples equal to what the encoder writes.

use crate::engine::{CheckResult, CheckWork};
use crate::log::{LogReader, ReaderSnapshot, SnapshotError};
use crate::model::{Command, CommandId, CommandKind, LogEntry, MemberId, MemberRef, ObjectId, Outcome};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Larger messages are refused before parsing.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Why bytes are not the message expected. Each says what was wrong and where, so the sender can fix it.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("message of {0} bytes is larger than the {MAX_MESSAGE}-byte limit")]
    TooLarge(usize),
    #[error("empty message: expected one JSON object ({what})")]
    Empty { what: &'static str },
    #[error("{what} is not UTF-8, as JSON must be: {source}")]
    NotUtf8 { what: &'static str, source: std::str::Utf8Error },
    /// Not JSON, or JSON of the wrong shape; serde_json's message names the line and column. It may quote a
    /// value: a URL's userinfo in it is shown as `***`, since the message is logged and sent back.
    #[error("malformed {what}: {}", crate::secret::redact_urls_in(&.source.to_string()))]
    Malformed { what: &'static str, source: serde_json::Error },
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    /// A log entry that says it needs a cluster format this build does not speak (`crate::format`).
    #[error("log entry needs cluster format {needs}; this build speaks {}", crate::format::CLUSTER_FORMAT)]
    TooNew { needs: u32 },
    /// A snapshot of a version newer than this build reads (`crate::format::SNAPSHOT_VERSION`): written by a newer
    /// build in a cluster at a newer format.
    #[error(
        "snapshot version {version} is newer than this build reads (up to {}): a newer jaque wrote it",
        crate::format::SNAPSHOT_VERSION
    )]
    SnapshotTooNew { version: u32 },
}

fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, WireError> {
    if bytes.len() > MAX_MESSAGE {
        return Err(WireError::TooLarge(bytes.len()));
    }
    if bytes.is_empty() {
        return Err(WireError::Empty { what });
    }
    // serde_json would refuse these bytes too, but as an unexpected character; this names the encoding.
    std::str::from_utf8(bytes).map_err(|source| WireError::NotUtf8 { what, source })?;
    serde_json::from_slice(bytes).map_err(|source| WireError::Malformed { what, source })
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("jaque's wire types always serialize")
}

/// A command as it arrives, before its ids and hop are checked, so that a refusal can name the field and the
/// hop bound instead of a type error.
#[derive(Deserialize)]
#[serde(expecting = "a command: a JSON object with id, object and kind")]
struct ArrivingCommand {
    id: String,
    object: String,
    #[serde(flatten)]
    kind: CommandKind,
    /// Wider than the model's `u8`, so `hop: 300` is "out of range" like `hop: 7`.
    #[serde(default)]
    hop: u64,
    /// The submitter wants to hear at once which engine took the command ([`Answer::Claimed`]) or that it
    /// cannot take it now ([`Answer::Declined`]), before the outcome.
    #[serde(default)]
    claim: bool,
}

/// A command from `jaque.work.cmd.ingress` or `jaque.cmd.<engine-id>`: hop 0 from a client, 1 on the one
/// forward an engine makes.
pub fn decode_command(bytes: &[u8]) -> Result<Command, WireError> {
    decode_request(bytes).map(|r| r.cmd)
}

/// A command as a request on a command subject: the command, and whether its submitter asked for a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub cmd: Command,
    /// Answer [`Answer::Claimed`] or [`Answer::Declined`] first (`"claim": true`, a submission only).
    pub claim: bool,
}

/// A command with the claim its submitter asks for, as a ui sends it through ingress: the command's own JSON
/// with `"claim":true` (an engine that predates claims ignores the field and answers only the outcome).
pub fn encode_claim_request(cmd: &Command) -> Vec<u8> {
    #[derive(Serialize)]
    struct Claiming<'a> {
        #[serde(flatten)]
        cmd: &'a Command,
        claim: bool,
    }
    encode(&Claiming { cmd, claim: true })
}

/// `decode_command`, keeping whether the submitter asked for a claim.
pub fn decode_request(bytes: &[u8]) -> Result<Request, WireError> {
    let cmd: ArrivingCommand = decode("command", bytes)?;
    let invalid = |reason: String| WireError::Invalid { what: "command", reason };
    let hop = match u8::try_from(cmd.hop) {
        Ok(hop @ 0..=1) => hop,
        _ => {
            return Err(invalid(format!(
                "hop {} is out of range: a client sends 0 (or leaves it out); 1 marks an engine's one forward",
                cmd.hop
            )))
        }
    };
    if cmd.claim && hop != 0 {
        return Err(invalid("claim with hop 1: a claim is asked by a submitter (hop 0), never on a forward".into()));
    }
    let id = CommandId::new(cmd.id).map_err(|e| invalid(format!("field \"id\": {e}")))?;
    let object = ObjectId::from_log(&cmd.object).map_err(|e| invalid(format!("field \"object\": {e}")))?;
    Ok(Request { cmd: Command { id, object, kind: cmd.kind, hop }, claim: cmd.claim })
}

/// What an engine sends on the reply subject of a request that asked for a claim: first `Claimed` (it took the
/// command and will answer its outcome) or `Declined` (it cannot take writes now: send it again, through
/// ingress another engine takes it), then, after `Claimed`, the `Outcome`. A request without a claim gets the
/// outcome alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `{"claimed":"<engine-id>"}`.
    Claimed {
        by: MemberId,
    },
    /// `{"declined":"<engine-id>","reason":"..."}`.
    Declined {
        by: MemberId,
        reason: String,
    },
    Outcome(Outcome),
}

#[derive(Serialize, Deserialize)]
struct ClaimedBody {
    claimed: MemberId,
}

#[derive(Serialize, Deserialize)]
struct DeclinedBody {
    declined: MemberId,
    reason: String,
}

pub fn encode_answer(answer: &Answer) -> Vec<u8> {
    match answer {
        Answer::Claimed { by } => encode(&ClaimedBody { claimed: by.clone() }),
        Answer::Declined { by, reason } => encode(&DeclinedBody { declined: by.clone(), reason: reason.clone() }),
        Answer::Outcome(o) => encode(o),
    }
}

/// An engine's answer on a reply subject: a claim, a decline, or the outcome.
pub fn decode_answer(bytes: &[u8]) -> Result<Answer, WireError> {
    /// Which of the three it is, by the key that names it.
    #[derive(Deserialize)]
    struct Keys {
        claimed: Option<serde::de::IgnoredAny>,
        declined: Option<serde::de::IgnoredAny>,
    }
    let keys: Keys = decode("answer", bytes)?;
    if keys.claimed.is_some() {
        decode::<ClaimedBody>("claim", bytes).map(|b| Answer::Claimed { by: b.claimed })
    } else if keys.declined.is_some() {
        decode::<DeclinedBody>("decline", bytes).map(|b| Answer::Declined { by: b.declined, reason: b.reason })
    } else {
        decode_outcome(bytes).map(Answer::Outcome)
    }
}

/// What an engine answers a request on a command subject whose bytes are not a command: `rejected`, with
/// what was wrong. Never silence: the caller learns it at once instead of waiting for its own timeout. Not
/// `unavailable`, because sending the same bytes again cannot help.
pub fn rejection(e: &WireError) -> Outcome {
    Outcome::Rejected { reason: e.to_string() }
}

pub fn decode_outcome(bytes: &[u8]) -> Result<Outcome, WireError> {
    decode("outcome", bytes)
}

/// A log entry's bytes. An entry that needs more than cluster format 1 starts with the format it needs,
/// `{"v":N,`, so a reader that does not speak it knows it from the first bytes, whatever else the entry holds.
pub fn encode_log_entry(entry: &LogEntry) -> Vec<u8> {
    let bytes = encode(entry);
    let needs = entry.needs();
    if needs <= crate::format::OLDEST_CLUSTER_FORMAT {
        return bytes;
    }
    let mut stamped = format!("{{\"v\":{needs},").into_bytes();
    stamped.extend_from_slice(&bytes[1..]);
    stamped
}

/// The cluster format an entry's bytes say they need (`encode_log_entry`), if they say one.
pub fn stamped_format(bytes: &[u8]) -> Option<u32> {
    let rest = bytes.strip_prefix(b"{\"v\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

pub fn decode_log_entry(bytes: &[u8]) -> Result<LogEntry, WireError> {
    if let Some(needs) = stamped_format(bytes).filter(|n| *n > crate::format::CLUSTER_FORMAT) {
        return Err(WireError::TooNew { needs });
    }
    let entry: LogEntry = decode("log entry", bytes)?;
    if let LogEntry::Epoch(r) = &entry {
        if !r.members.windows(2).all(|w| w[0].id < w[1].id) {
            return Err(WireError::Invalid { what: "epoch record", reason: "members not sorted by unique id".into() });
        }
    }
    Ok(entry)
}

/// How many checks an engine puts in one message of check work at most: the checks of one dispatch travel
/// together, so a worker wakes once for them and answers them together, and a dispatch of many still spreads
/// over several workers of the queue group.
pub const CHECKS_PER_MESSAGE: usize = 32;

/// Check work or results as they travel on the `-queue`: a JSON array of them (what engines and workers send),
/// or one JSON object alone (what they sent before batching; a worker answers it in kind).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub fn into_vec(self) -> Vec<T> {
        match self {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v,
        }
    }
}

fn decode_one_or_many<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<OneOrMany<T>, WireError> {
    if bytes.trim_ascii_start().first() == Some(&b'[') {
        decode(what, bytes).map(OneOrMany::Many)
    } else {
        decode(what, bytes).map(OneOrMany::One)
    }
}

pub fn decode_check_work(bytes: &[u8]) -> Result<OneOrMany<CheckWork>, WireError> {
    decode_one_or_many("check work", bytes)
}

pub fn decode_check_result(bytes: &[u8]) -> Result<OneOrMany<CheckResult>, WireError> {
    decode_one_or_many("check result", bytes)
}

/// A reader's snapshot as bytes (JSON, versioned). Snapshots grow with the objects, so the message size limit
/// does not apply to them.
pub fn encode_snapshot(s: &ReaderSnapshot) -> Vec<u8> {
    encode(s)
}

/// `encode_snapshot`'s bytes written to `out` as they are made, so that a caller can store them as they come
/// instead of holding them whole (a snapshot of a million objects is ~240 MB). An error is `out`'s.
pub fn write_snapshot(s: &ReaderSnapshot, out: impl std::io::Write) -> std::io::Result<()> {
    serde_json::to_writer(out, s).map_err(std::io::Error::from)
}

/// A snapshot back to a reader in the state it records, or why not (never a panic).
pub fn decode_snapshot(bytes: &[u8]) -> Result<LogReader, WireError> {
    snapshot_reader(serde_json::from_slice(bytes))
}

/// `decode_snapshot` of bytes read from `from` as they come (they are never held whole), to its end: an error
/// reading them (a truncated or damaged snapshot) is the snapshot's error.
pub fn read_snapshot(from: impl std::io::Read) -> Result<LogReader, WireError> {
    snapshot_reader(serde_json::from_reader(std::io::BufReader::with_capacity(1 << 16, from)))
}

fn snapshot_reader(s: Result<ReaderSnapshot, serde_json::Error>) -> Result<LogReader, WireError> {
    let s = s.map_err(|source| WireError::Malformed { what: "snapshot", source })?;
    LogReader::from_snapshot(s).map_err(|e| match e {
        SnapshotError::Version(version) if version > crate::format::SNAPSHOT_VERSION => {
            WireError::SnapshotTooNew { version }
        }
        e => WireError::Invalid { what: "snapshot", reason: e.to_string() },
    })
}

/// The value of a membership key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub incarnation: u64,
    /// The cluster format the member speaks (`crate::format`); absent from the values of builds before v0.1.0,
    /// which speak 1.
    #[serde(default = "crate::format::unnamed")]
    pub format: u32,
}

/// A membership key's value, with the member id taken from the key, and the cluster format it speaks.
pub fn decode_heartbeat(id: &str, bytes: &[u8]) -> Result<(MemberRef, u32), WireError> {
    let hb: Heartbeat = decode("heartbeat", bytes)?;
    let id = MemberId::new(id).map_err(|e| WireError::Invalid { what: "heartbeat key", reason: e.to_string() })?;
    if hb.format < crate::format::OLDEST_CLUSTER_FORMAT {
        return Err(WireError::Invalid { what: "heartbeat", reason: format!("format {} does not exist", hb.format) });
    }
    Ok((MemberRef { id, incarnation: hb.incarnation }, hb.format))
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
                    ..ObjectDef::UNSET
                },
            },
            hop: 0,
        };
        assert_eq!(decode_command(&encode(&cmd)).unwrap(), cmd);
    }

    #[test]
    fn every_undecodable_command_is_answered_rejected_naming_what_was_wrong() {
        let cases: [(&[u8], &str); 10] = [
            (b"", "empty message"),
            (&[0xff, 0xfe], "not UTF-8"),
            (br#"{"id":"c","object":"x","kind":"de"#, "line 1 column 33"),
            (b"null", "expected a command"),
            (br#"{"id":"c","object":"x","kind":"delete"} x"#, "trailing characters at line 1 column 41"),
            (br#"{"id":"c","object":"x","kind":"delete","hop":7}"#, "hop 7 is out of range: a client sends 0"),
            (br#"{"id":"c","object":"x","kind":"delete","hop":300}"#, "hop 300 is out of range"),
            (br#"{"id":"a b","object":"x","kind":"delete"}"#, r#"field "id": command id contains ' '; allowed are"#),
            (br#"{"id":"c","object":"../../etc","kind":"delete"}"#, r#"field "object": object id contains '/'"#),
            (br#"{"id":"c","object":"x","kind":"put"}"#, "missing field `def`"),
        ];
        for (bytes, expected) in cases {
            let e = decode_command(bytes).expect_err("not a command");
            match rejection(&e) {
                Outcome::Rejected { reason } => assert!(reason.contains(expected), "{reason:?} lacks {expected:?}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn check_work_and_results_travel_as_arrays_and_one_alone_is_read_as_one() {
        let work = |id: u64| CheckWork {
            check_id: id,
            object: ObjectId::new("web").unwrap(),
            probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
            timeout_ms: 1_000,
        };
        let many = [work(1), work(2)];
        assert_eq!(decode_check_work(&encode(&many)).unwrap(), OneOrMany::Many(many.to_vec()));
        assert_eq!(decode_check_work(&encode(&many[0])).unwrap(), OneOrMany::One(work(1)));
        assert_eq!(encode(&OneOrMany::One(work(1))), encode(&work(1)), "one alone is sent as before batching");
        assert_eq!(decode_check_work(b" \n[]").unwrap().into_vec(), []);
        let result =
            CheckResult { check_id: 7, object: ObjectId::new("web").unwrap(), state: State::Ok, output: "".into() };
        assert_eq!(decode_check_result(&encode(&[&result])).unwrap().into_vec(), std::slice::from_ref(&result));
        assert_eq!(decode_check_result(&encode(&result)).unwrap(), OneOrMany::One(result));
        for (bytes, expected) in
            [(&b"[{}]"[..], "malformed check work: missing field"), (b"[1,", "malformed check work")]
        {
            let e = decode_check_work(bytes).unwrap_err().to_string();
            assert!(e.contains(expected), "{e}");
        }
    }

    #[test]
    fn a_claim_request_is_the_command_with_claim_and_answers_read_back() {
        let cmd = decode_command(br#"{"id":"c","object":"x","kind":"delete"}"#).unwrap();
        let bytes = encode_claim_request(&cmd);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"id":"c","object":"x","kind":"delete","hop":0,"claim":true}"#
        );
        assert_eq!(decode_request(&bytes).unwrap(), Request { cmd: cmd.clone(), claim: true });
        assert_eq!(decode_command(&bytes).unwrap(), cmd, "an engine reading commands alone takes it as before");
        assert_eq!(decode_request(&encode(&cmd)).unwrap(), Request { cmd, claim: false });
        let e = decode_request(br#"{"id":"c","object":"x","kind":"delete","hop":1,"claim":true}"#).unwrap_err();
        assert!(e.to_string().contains("never on a forward"), "{e}");
        let by = MemberId::new("e2").unwrap();
        for answer in [
            Answer::Claimed { by: by.clone() },
            Answer::Declined { by, reason: "leaving".into() },
            Answer::Outcome(Outcome::NotOwned),
            Answer::Outcome(Outcome::Unavailable { reason: "x".into() }),
        ] {
            assert_eq!(decode_answer(&encode_answer(&answer)).unwrap(), answer);
        }
        for (bytes, expected) in [
            (&br#"{"claimed":"a b"}"#[..], "malformed claim"),
            (br#"{"declined":"e1"}"#, "missing field `reason`"),
            (br#"{"outcome":"maybe"}"#, "malformed outcome"),
            (b"[]", "malformed answer"),
        ] {
            let e = decode_answer(bytes).unwrap_err().to_string();
            assert!(e.contains(expected), "{e} lacks {expected}");
        }
    }

    #[test]
    fn a_command_without_hop_is_a_clients_hop_0() {
        let cmd = decode_command(br#"{"id":"c","object":"x","kind":"delete"}"#).unwrap();
        assert_eq!(cmd.hop, 0);
    }

    /// `docs/wire.md` is the format for clients: every example there must be what the encoder writes, and every
    /// rejection there the answer to its input.
    #[test]
    fn wire_md_examples_are_what_the_encoder_writes() {
        let doc = include_str!("../../docs/wire.md");
        let block = |info: &str| -> Vec<&str> {
            let fence = format!("```{info}");
            let start = doc.lines().position(|l| l == fence).unwrap_or_else(|| panic!("no {fence} block"));
            doc.lines().skip(start + 1).take_while(|l| *l != "```").collect()
        };
        let commands = block("json command");
        let kinds: std::collections::BTreeSet<&str> =
            commands.iter().map(|l| decode_command(l.as_bytes()).unwrap().kind.name()).collect();
        assert_eq!(kinds.len(), 8, "an example of every command kind: {kinds:?}");
        let ops: std::collections::BTreeSet<&str> =
            commands.iter().filter_map(|l| l.split("\"op\":\"").nth(1)?.split('"').next()).collect();
        assert_eq!(ops.len(), 5, "policy examples: {ops:?}");
        for line in commands {
            let cmd = decode_command(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(String::from_utf8(encode(&cmd)).unwrap(), line);
        }
        for line in block("json claim request") {
            let r = decode_request(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(r.claim, "{line}");
            assert_eq!(String::from_utf8(encode_claim_request(&r.cmd)).unwrap(), line);
        }
        let answers = block("json answer");
        assert_eq!(answers.len(), 2, "a claim and a decline");
        for line in answers {
            let answer = decode_answer(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(!matches!(answer, Answer::Outcome(_)), "{line}");
            assert_eq!(String::from_utf8(encode_answer(&answer)).unwrap(), line);
        }
        let outcomes = block("json outcome");
        assert_eq!(outcomes.len(), 5, "an example of every outcome");
        for line in outcomes {
            let outcome = decode_outcome(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(String::from_utf8(encode(&outcome)).unwrap(), line);
        }

        // The rejection table: `| sent | answer |`, code spans with one or two backticks.
        let code = |cell: &str| -> String {
            let cell = cell.trim();
            let inner = match cell.strip_prefix("`` ") {
                Some(rest) => rest.strip_suffix(" ``"),
                None => cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')),
            };
            inner.unwrap_or_else(|| panic!("not a code span: {cell}")).to_string()
        };
        let section = doc.split("## What is rejected").nth(1).expect("the rejection section");
        let section = section.split("\n## ").next().unwrap_or_default();
        let mut rows = 0;
        for row in section.lines().filter(|l| l.starts_with("| ") && l.contains("outcome")) {
            let cells: Vec<&str> = row.trim_matches('|').splitn(2, " | ").collect();
            let sent = cells[0].trim();
            let bytes: Vec<u8> = if sent == "no bytes" {
                Vec::new()
            } else if let Some(hex) = sent.strip_prefix("the bytes ") {
                code(hex).split(' ').map(|b| u8::from_str_radix(b, 16).expect("hex byte")).collect()
            } else {
                code(sent).into_bytes()
            };
            let answer = encode(&rejection(&decode_command(&bytes).expect_err(sent)));
            assert_eq!(String::from_utf8(answer).unwrap(), code(cells[1]), "the answer to {sent}");
            rows += 1;
        }
        assert_eq!(rows, 8, "every rejection in the table was checked");
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

//! The NATS command subjects as a client sees them (`docs/wire.md`): with a real NATS client, every request on
//! `jaque.work.cmd.ingress` and `jaque.cmd.<engine-id>` is answered, malformed ones with `rejected` and what was
//! wrong, within the request timeout; a message without a reply subject is counted and dropped; every process
//! stays ready throughout.

use async_nats::ConnectOptions;
use jaque_core::{wire, Outcome};
use jaque_tests::{poll, Jaque, Nats};
use std::time::Duration;

/// What a client should wait for an answer (`docs/wire.md`: an engine's reply timeout plus one forward).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(7);

fn engine(nats: &Nats, id: &str) -> Jaque {
    Jaque::start(
        id,
        &["-target", "engine", "-queue", &nats.url, "-coordination", &nats.url, "-id", id, "-heartbeat-ttl", "3s"],
    )
}

fn sum(engines: &[&Jaque], sample: &str) -> f64 {
    engines.iter().map(|e| e.metric(sample).unwrap_or(0.0)).sum()
}

/// Each malformed input of the issue, with a part of the reason it must be rejected with.
const MALFORMED: [(&[u8], &str); 7] = [
    (b"", "empty message"),
    (br#"{"id":"c-1","object":"web","kind":"del"#, "at line 1 column 38"),
    (b"null", "expected a command"),
    (&[0xff, 0xfe, 0x7b], "not UTF-8"),
    (br#"{"id":"c-2","object":"web","kind":"delete","hop":7}"#, "hop 7 is out of range"),
    (br#"{"id":"a b","object":"web","kind":"delete"}"#, r#"field "id": command id contains ' '"#),
    (br#"{"id":"c-3","object":"../../etc","kind":"delete"}"#, r#"field "object": object id contains '/'"#),
];

#[test]
fn every_request_on_a_command_subject_is_answered_and_malformed_ones_are_rejected_with_the_reason() {
    let nats = Nats::start();
    let (e1, e2) = (engine(&nats, "e1"), engine(&nats, "e2"));
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &nats.url]);
    let everyone = [&e1, &e2, &ui];
    for p in everyone {
        p.wait_ready();
    }
    let engines = [&e1, &e2];
    let subjects = ["jaque.work.cmd.ingress", "jaque.cmd.e1", "jaque.cmd.e2"];

    let url = nats.url.clone();
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let client = ConnectOptions::new().request_timeout(Some(REQUEST_TIMEOUT)).connect(&url).await.unwrap();
        let request = |subject: &'static str, payload: Vec<u8>| {
            let client = client.clone();
            async move {
                let msg = client
                    .request(subject, payload.into())
                    .await
                    .unwrap_or_else(|e| panic!("no answer on {subject} within {REQUEST_TIMEOUT:?}: {e}"));
                wire::decode_outcome(&msg.payload)
                    .unwrap_or_else(|e| panic!("the answer on {subject} is not an outcome ({e}): {msg:?}"))
            }
        };

        // An engine joins the ingress queue group right after it turns ready: until the server has its
        // subscription, a request there finds no responder. A well-formed write is applied once it has.
        let put = br#"{"id":"put-web","object":"web","kind":"put","def":{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":60000,"timeout_ms":1000}}"#;
        let mut answered = None;
        while answered.is_none() {
            match client.request("jaque.work.cmd.ingress", put.to_vec().into()).await {
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                r => answered = Some(wire::decode_outcome(&r.expect("an answer on ingress").payload)),
            }
        }
        assert!(matches!(answered, Some(Ok(Outcome::Applied { .. }))), "{answered:?}");

        for subject in subjects {
            for (bytes, expected) in MALFORMED {
                match request(subject, bytes.to_vec()).await {
                    Outcome::Rejected { reason } => assert!(
                        reason.contains(expected),
                        "{subject}, {:?}: the reason {reason:?} does not say {expected:?}",
                        String::from_utf8_lossy(bytes)
                    ),
                    other => panic!("{subject}, {:?}: answered {other:?}", String::from_utf8_lossy(bytes)),
                }
            }
            // Well-formed with an invalid definition: the engine's own rejection, as before.
            let bad_def = br#"{"id":"bad-def","object":"web","kind":"put","def":{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":0,"timeout_ms":0}}"#;
            match request(subject, bad_def.to_vec()).await {
                Outcome::Rejected { reason } => assert!(reason.contains("interval"), "{subject}: {reason:?}"),
                other => panic!("{subject}, an invalid definition: answered {other:?}"),
            }
        }

        // No reply subject: nobody to answer, so counted and dropped, never applied.
        for subject in subjects {
            let cmd = br#"{"id":"fire-and-forget","object":"never","kind":"put","def":{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":60000,"timeout_ms":1000}}"#;
            client.publish(subject, cmd.to_vec().into()).await.unwrap();
        }
        client.flush().await.unwrap();
    });

    let malformed = (MALFORMED.len() * subjects.len()) as f64;
    assert_eq!(sum(&engines, "jaque_wire_decode_errors_total{what=\"command\"}"), malformed);
    poll("the three messages without a reply subject to be counted", || {
        (sum(&engines, "jaque_wire_decode_errors_total{what=\"command without reply subject\"}") == 3.0).then_some(())
    });
    poll("the ui to read the applied put", || (ui.get("/api/objects/web").status == 200).then_some(()));
    assert_eq!(ui.get("/api/objects/never").status, 404, "a command nobody could be told about was applied");
    for p in everyone {
        let health = p.get("/healthz");
        assert_eq!(health.status, 200, "{} is not ready after the malformed commands: {}", p.proc.name, health.text());
    }
}

//! Check work as a worker takes it from the `-queue` (`jaque.work.check`, queue group `jaque-workers`), with a
//! real NATS client in the engine's place: work comes as a JSON array and its results go back as arrays of at
//! most `CHECKS_PER_MESSAGE`, every check answered once; one object alone (an engine from before batching) is
//! answered with one object; malformed work is counted and skipped, and the worker keeps serving. A worker sent
//! more than it can run drops, unstarted and counted, the work whose engine has stopped waiting for it.

use futures_util::StreamExt;
use jaque_core::wire::{self, OneOrMany, CHECKS_PER_MESSAGE};
use jaque_core::{CheckResult, CheckWork, ObjectId, Probe, State};
use jaque_tests::{poll, Jaque, Nats};
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

fn tcp(check_id: u64, addr: &str) -> CheckWork {
    CheckWork {
        check_id,
        object: ObjectId::new(format!("o{check_id}")).unwrap(),
        probe: Probe::Tcp { addr: addr.into() },
        timeout_ms: 5_000,
    }
}

#[test]
fn a_worker_answers_an_array_of_work_in_arrays_and_one_alone_in_kind() {
    let nats = Nats::start();
    let worker = Jaque::start("w1", &["-target", "worker", "-queue", &nats.url, "-id", "w1"]);
    worker.wait_ready();
    let open = TcpListener::bind("127.0.0.1:0").unwrap();
    let open = open.local_addr().map(|a| (open, a.to_string())).unwrap();
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let url = nats.url.clone();
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let client = async_nats::connect(&url).await.unwrap();
        let mut results = client.subscribe("test.results").await.unwrap();
        // The worker joins the queue group a moment after it answers health: until then NATS answers "no
        // responders".
        let one = loop {
            match client.request("jaque.work.check", wire::encode(&tcp(0, &open.1)).into()).await {
                Ok(msg) => break msg,
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                Err(e) => panic!("{e}"),
            }
        };
        match wire::decode_check_result(&one.payload).unwrap() {
            OneOrMany::One(r) => assert_eq!((r.check_id, r.state), (0, State::Ok), "{r:?}"),
            many => panic!("one work alone answered with an array: {many:?}"),
        }

        // 80 checks in three messages, half to an open port and half to a closed one.
        let work: Vec<CheckWork> = (1..=80).map(|i| tcp(i, if i % 2 == 0 { &open.1 } else { &closed })).collect();
        for part in work.chunks(CHECKS_PER_MESSAGE) {
            client.publish_with_reply("jaque.work.check", "test.results", wire::encode(&part).into()).await.unwrap();
        }
        client.flush().await.unwrap();
        let mut got: BTreeMap<u64, CheckResult> = BTreeMap::new();
        while got.len() < work.len() {
            let msg = results.next().await.unwrap();
            let OneOrMany::Many(many) = wire::decode_check_result(&msg.payload).unwrap() else {
                panic!("an array of work answered with one result alone");
            };
            assert!(!many.is_empty() && many.len() <= CHECKS_PER_MESSAGE, "{} results in one message", many.len());
            for r in many {
                assert!(got.insert(r.check_id, r).is_none(), "a check answered twice");
            }
        }
        for (id, r) in &got {
            let expected = if id % 2 == 0 { State::Ok } else { State::Critical };
            assert_eq!((r.state, r.object.as_str()), (expected, format!("o{id}").as_str()), "{r:?}");
        }

        // Malformed work: counted and skipped; the worker goes on.
        for bad in [&b"[{\"check_id\":1}]"[..], b"{", b"[1,2]"] {
            client.publish_with_reply("jaque.work.check", "test.results", bad.to_vec().into()).await.unwrap();
        }
        client.publish("jaque.work.check", wire::encode(&[tcp(100, &open.1)]).into()).await.unwrap();
        client.flush().await.unwrap();
    });
    poll("malformed work and work without a reply subject are counted", || {
        let n = |what: &str| worker.metric(&format!("jaque_wire_decode_errors_total{{what=\"{what}\"}}"));
        (n("check work") == Some(3.0) && n("check work without reply subject") == Some(1.0)).then_some(())
    });
    worker.wait_ready();
    drop(open);
}

/// A port whose connects never complete: a listener that accepts nothing, its queue of one full. A connect to it
/// waits for its timeout, as one to a host that drops packets does.
fn blackhole() -> (TcpListener, Vec<TcpStream>, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: listen(2) on the listener's own socket; a backlog of 0 leaves room for one connection.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
    let addr = l.local_addr().unwrap();
    let mut held = Vec::new();
    while let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
        held.push(s);
        assert!(held.len() < 16, "the listener's queue never filled");
    }
    (l, held, addr.to_string())
}

#[test]
fn work_older_than_its_timeout_and_the_grace_is_dropped_unstarted_and_fresh_work_still_runs() {
    let nats = Nats::start();
    let worker =
        Jaque::start("w1", &["-target", "worker", "-queue", &nats.url, "-id", "w1", "-worker-concurrency", "1"]);
    worker.wait_ready();
    let (_hole, _held, hole) = blackhole();
    let open = TcpListener::bind("127.0.0.1:0").unwrap();
    let open_addr = open.local_addr().unwrap().to_string();
    const SENT: u64 = 100;
    let url = nats.url.clone();
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let client = async_nats::connect(&url).await.unwrap();
        let mut results = client.subscribe("test.results").await.unwrap();
        // Wait for the worker's queue subscription: a request is answered once it is there.
        loop {
            match client.request("jaque.work.check", wire::encode(&[tcp(1000, &open_addr)]).into()).await {
                Ok(_) => break,
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
        // 100 checks that each run to their 100 ms timeout, one at a time: in the 2.1 s their engine would wait
        // (timeout and grace), the worker can start about 21 of them.
        let work: Vec<CheckWork> = (1..=SENT).map(|i| CheckWork { timeout_ms: 100, ..tcp(i, &hole) }).collect();
        for part in work.chunks(CHECKS_PER_MESSAGE) {
            client.publish_with_reply("jaque.work.check", "test.results", wire::encode(&part).into()).await.unwrap();
        }
        client.flush().await.unwrap();
        let waiting = || worker.metric("jaque_worker_checks_waiting");
        jaque_tests::poll_async("checks waiting for the worker's one slot", || async {
            waiting().filter(|w| *w > 0.0)
        })
        .await;
        let expired = || worker.metric("jaque_worker_checks_expired_total").unwrap_or(0.0) as u64;
        let mut answered = 0;
        while answered + expired() < SENT {
            let msg = tokio::time::timeout(Duration::from_millis(500), results.next()).await;
            if let Ok(Some(msg)) = msg {
                for r in wire::decode_check_result(&msg.payload).unwrap().into_vec() {
                    assert_eq!(r.state, State::Critical, "{r:?}");
                    assert!(r.output.contains("timed out"), "{r:?}");
                    answered += 1;
                }
            }
        }
        assert_eq!(answered + expired(), SENT, "every check either answered or dropped, once");
        assert_eq!(waiting(), Some(0.0));
        assert!(answered < SENT / 2, "{answered} of {SENT} answered: work the engine stopped waiting for was run");
        // The checks started waited for the one slot, one after another: some for longer than one check's
        // 100 ms, none past its timeout and the grace (2.1 s).
        let started = worker.metric("jaque_worker_check_wait_seconds_count").unwrap();
        let within =
            |le: &str| worker.metric(&format!("jaque_worker_check_wait_seconds_bucket{{le=\"{le}\"}}")).unwrap();
        assert!(started >= answered as f64, "{started} started, {answered} answered");
        assert!(within("0.1") < started, "every check started within 100 ms of being taken");
        assert_eq!(within("5"), started, "a check started after waiting past its timeout and the grace");
        // Fresh work is run at once: the old did not queue ahead of it.
        client
            .publish_with_reply("jaque.work.check", "test.results", wire::encode(&[tcp(SENT + 1, &open_addr)]).into())
            .await
            .unwrap();
        let msg = results.next().await.unwrap();
        let fresh = wire::decode_check_result(&msg.payload).unwrap().into_vec();
        assert_eq!(fresh.iter().map(|r| (r.check_id, r.state)).collect::<Vec<_>>(), [(SENT + 1, State::Ok)]);
    });
}

//! The simulated webhook endpoints the notifiers send to (1–3 per seed), and the HTTP between them. Each
//! endpoint draws a behaviour: answering 2xx, failing for a while then recovering (5xx, a 3xx or 4xx, or a
//! refused connection), answering slowly (in the safety phase sometimes past the notifiers' send timeout), answering 429
//! with a `Retry-After` for a while, or answering 410 Gone from some moment on. The bad periods end at the heal;
//! 410 stays. Every request that reaches an endpoint is recorded (webhook-id, seq, object, notifier, time, the
//! answer); a 2xx is a delivery. The notifier's HTTP client gets exactly one answer per send: the endpoint's, a
//! refused connection, or a timeout when no answer came within the send timeout (the endpoint may have taken the
//! delivery all the same: that is a send whose answer was lost, which may be repeated).

use super::NEv;
use crate::params::{stream, EndpointKind, EndpointParams, Stream};
use crate::world::process::Peer;
use crate::world::{exp, Ev, Phase, Sim};
use jaque_core::notifier::{Delivery, Endpoint, SendResult};
use jaque_core::{MemberRef, ObjectId, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Scenarios: the answer an endpoint gives from now on, whatever it drew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ok,
    Fail5xx,
    Refuse,
    /// 2xx after this many milliseconds.
    Slow(u64),
    /// 429 with `Retry-After` of this many seconds.
    TooMany(u64),
    Gone,
}

/// A request that reached an endpoint.
#[derive(Clone, Debug)]
pub struct Reception {
    pub webhook_id: String,
    pub seq: u64,
    pub object: ObjectId,
    /// The notifier that sent it.
    pub by: MemberRef,
    pub at: Time,
    /// The HTTP status it answered.
    pub status: u16,
    /// The simulator's number of the send (one per `Output::Send`).
    pub attempt: u64,
}

impl Reception {
    /// A 2xx: the endpoint took the delivery.
    pub fn delivered(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// One endpoint: its identity as the notifiers know it, its behaviour, and what reached it.
pub struct SimEndpoint {
    pub endpoint: Endpoint,
    pub params: EndpointParams,
    rng: ChaCha8Rng,
    /// The current period of a failing or rate-limited endpoint: bad or not, until when.
    bad: bool,
    until: Time,
    pub mode: Option<Mode>,
    pub received: Vec<Reception>,
    /// Requests refused (connection refused: nothing reached it).
    pub refused: u64,
    /// It has answered 410 at least once.
    pub answered_gone: bool,
}

/// An endpoint's answer to one request, and how long it took to give it.
#[derive(Clone, Copy, Debug)]
enum Reply {
    Status { code: u16, retry_after_s: Option<u64> },
    Refused,
}

impl SimEndpoint {
    pub fn new(seed: u64, i: usize, params: EndpointParams) -> SimEndpoint {
        let mut rng = stream(seed, Stream::Endpoint, i as u64);
        let until = Time(exp(&mut rng, params.healthy_mean_ms));
        SimEndpoint {
            endpoint: Endpoint::new(format!("http://hook{}.test/jaque", i + 1)),
            params,
            rng,
            bad: false,
            until,
            mode: None,
            received: Vec::new(),
            refused: 0,
            answered_gone: false,
        }
    }

    /// Whether the endpoint is in a bad period at `now` (the periods are drawn as time passes).
    fn bad_at(&mut self, now: Time) -> bool {
        while now >= self.until {
            self.bad = !self.bad;
            let len = if self.bad {
                self.rng.random_range(500..=self.params.bad_max_ms.max(500))
            } else {
                exp(&mut self.rng, self.params.healthy_mean_ms)
            };
            self.until = self.until + Duration::from_millis(len);
        }
        self.bad
    }

    /// The answer to a request arriving at `now`, and its processing time.
    fn decide(&mut self, now: Time, healed: bool, send_timeout_ms: u64) -> (Reply, u64) {
        let quick = self.rng.random_range(1..=20);
        let ok = Reply::Status { code: 200, retry_after_s: None };
        if let Some(mode) = self.mode {
            return match mode {
                Mode::Ok => (ok, quick),
                Mode::Fail5xx => (Reply::Status { code: 503, retry_after_s: None }, quick),
                Mode::Refuse => (Reply::Refused, 0),
                Mode::Slow(ms) => (ok, ms),
                Mode::TooMany(s) => (Reply::Status { code: 429, retry_after_s: Some(s) }, quick),
                Mode::Gone => (Reply::Status { code: 410, retry_after_s: None }, quick),
            };
        }
        let p = self.params;
        match p.kind {
            EndpointKind::Ok => (ok, quick),
            EndpointKind::Gone if now.0 >= p.gone_at_ms => (Reply::Status { code: 410, retry_after_s: None }, quick),
            EndpointKind::Gone => (ok, quick),
            EndpointKind::Slow => {
                let max = if healed { p.slow_max_ms.min(send_timeout_ms / 2) } else { p.slow_max_ms };
                let ms = self.rng.random_range(1..=max.max(1));
                (ok, ms)
            }
            EndpointKind::Failing { connect } => {
                if healed || !self.bad_at(now) {
                    (ok, quick)
                } else if connect {
                    (Reply::Refused, 0)
                } else {
                    // Only 2xx is a delivery: a redirect or a client error is retried like a 5xx.
                    let code = [500, 502, 503, 504, 302, 400][self.rng.random_range(0..6)];
                    (Reply::Status { code, retry_after_s: None }, quick)
                }
            }
            EndpointKind::RateLimited => {
                if healed || !self.bad_at(now) {
                    (ok, quick)
                } else {
                    let s = p.retry_after_s;
                    (Reply::Status { code: 429, retry_after_s: Some(s) }, quick)
                }
            }
        }
    }
}

/// How the notifier's HTTP client reports an answer.
fn result_of(reply: Reply) -> SendResult {
    match reply {
        Reply::Status { code: 200..=299, .. } => SendResult::Delivered,
        Reply::Status { code: 410, .. } => SendResult::Gone,
        Reply::Status { code, retry_after_s } => {
            SendResult::Retry { after: retry_after_s.map(Duration::from_secs), reason: format!("HTTP {code}") }
        }
        Reply::Refused => SendResult::Retry { after: None, reason: "connection refused".into() },
    }
}

fn timed_out() -> SendResult {
    SendResult::Retry { after: None, reason: "timeout".into() }
}

/// A send on its way to an endpoint.
#[derive(Clone, Debug)]
pub(in crate::world) struct Request {
    pub slot: usize,
    pub inc: u64,
    pub attempt: u64,
    pub endpoint: usize,
    pub delivery: Delivery,
    /// The client gives up at this time.
    pub timeout_at: Time,
    /// Its answer is lost (scenarios).
    pub lose: bool,
}

impl Sim {
    /// One HTTP hop's latency (HTTP is not NATS: a clogged notifier's store traffic is not slowed here).
    fn http_delay(&mut self) -> u64 {
        1 + self.notify.net.random_range(0..=self.params.net_delay_max_ms)
    }

    /// Notifier `s` POSTs `delivery`: it reaches its endpoint unless the notifier is cut from the endpoints (a
    /// refused connection at once).
    /// `lose`: the request arrives but its answer is lost (scenarios).
    pub(in crate::world) fn http_send(
        &mut self,
        s: usize,
        attempt: u64,
        endpoint: usize,
        delivery: Delivery,
        lose: bool,
    ) {
        let inc = self.notify.slots[s].inc;
        let timeout_at = self.now + Duration::from_millis(self.params.notify.send_timeout_ms);
        if !self.notify.slots[s].reaches(Peer::Endpoints) {
            let result = SendResult::Retry { after: None, reason: "connection refused".into() };
            self.after(1, Ev::Notify(NEv::sent(s, inc, delivery.op, result)));
            return;
        }
        let d = self.http_delay();
        let req = Request { slot: s, inc, attempt, endpoint, delivery, timeout_at, lose };
        self.after(d, Ev::Notify(NEv::HttpArrive(Box::new(req))));
    }

    /// A request reaches its endpoint: recorded, checked, answered (or timed out at the client).
    pub(in crate::world) fn http_arrive(&mut self, req: Request) {
        let healed = self.phase != Phase::Safety;
        let timeout = self.params.notify.send_timeout_ms;
        let (reply, processing) = self.notify.endpoints[req.endpoint].decide(self.now, healed, timeout);
        let by = MemberRef { id: self.notify.slots[req.slot].id.clone(), incarnation: req.inc };
        let Request { slot, inc, attempt, endpoint, delivery, timeout_at, lose } = req;
        let op = delivery.op;
        match reply {
            Reply::Refused => {
                self.notify.endpoints[endpoint].refused += 1;
                self.after(1, Ev::Notify(NEv::sent(slot, inc, op, result_of(reply))));
                return;
            }
            Reply::Status { code, .. } => {
                let rec = Reception {
                    webhook_id: delivery.webhook_id.clone(),
                    seq: delivery.seq,
                    object: delivery.object.clone(),
                    by,
                    at: self.now,
                    status: code,
                    attempt,
                };
                if code == 410 {
                    self.notify.endpoints[endpoint].answered_gone = true;
                }
                self.tr(|| {
                    format!("hook{} <- {} seq {} from {}: {code}", endpoint + 1, rec.webhook_id, rec.seq, rec.by)
                });
                self.check_reception(endpoint, &rec, &delivery.body);
                self.notify.endpoints[endpoint].received.push(rec);
            }
        }
        let back = self.http_delay();
        let answer_at = self.now + Duration::from_millis(processing + back);
        if answer_at <= timeout_at && !lose {
            self.push(answer_at, Ev::Notify(NEv::HttpAnswer { slot, inc, op, result: result_of(reply), timeout_at }));
        } else {
            self.push(timeout_at, Ev::Notify(NEv::sent(slot, inc, op, timed_out())));
        }
    }

    /// An endpoint's answer reaches the notifier's host; lost if the notifier is cut from the endpoints now (its
    /// client then times out).
    pub(in crate::world) fn http_answer(
        &mut self,
        slot: usize,
        inc: u64,
        op: u64,
        result: SendResult,
        timeout_at: Time,
    ) {
        if !self.notify.slots[slot].reaches(Peer::Endpoints) {
            self.push(timeout_at, Ev::Notify(NEv::sent(slot, inc, op, timed_out())));
        } else {
            self.push(self.now, Ev::Notify(NEv::sent(slot, inc, op, result)));
        }
    }

    /// Scenarios: endpoint `i` answers like this from now on.
    pub fn set_endpoint(&mut self, i: usize, mode: Mode) {
        self.notify.endpoints[i].mode = Some(mode);
    }

    /// Every request that reached endpoint `i`, in arrival order.
    pub fn receptions(&self, i: usize) -> &[Reception] {
        &self.notify.endpoints[i].received
    }

    pub fn endpoint(&self, i: usize) -> &Endpoint {
        &self.notify.endpoints[i].endpoint
    }
}

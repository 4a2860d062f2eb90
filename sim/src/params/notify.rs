//! What a seed draws for its notifiers and the webhook endpoints they send to (parameter stream 4; the
//! endpoints' behaviours come from the same stream): a seed without notifiers draws and runs exactly the world it
//! did before notifiers joined the simulator. The simulated notifiers and endpoints are `world/notifier/mod.rs`
//! and `world/notifier/endpoint.rs`.

use super::{pick_u64, stream, FaultKind, Params, Stream};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::fmt;

/// `-notify-give-up` as shipped: a day, so nothing in a simulated run is given up.
pub const GIVE_UP_NEVER_MS: u64 = 24 * 3600 * 1000;

/// What a seed draws for its notifiers and endpoints (from its own parameter stream).
#[derive(Clone, Debug)]
pub struct NotifyParams {
    pub notifiers: usize,
    pub endpoints: Vec<EndpointParams>,
    /// Each notifier first starts at a time uniform in `0..=start_max_ms` (after the first transitions, often).
    pub start_max_ms: u64,
    pub concurrency: usize,
    pub give_up_ms: u64,
    pub retry_base_ms: u64,
    pub retry_max_ms: u64,
    pub claim_recheck_ms: u64,
    pub max_pending: usize,
    pub replay_chunk: u64,
    pub max_held: usize,
    pub leave_timeout_ms: u64,
    /// A store request of a notifier (a heartbeat, a KV read or write, a log read) with no answer fails after
    /// this long; it may still land.
    pub store_timeout_ms: u64,
    /// The HTTP client's timeout of one send.
    pub send_timeout_ms: u64,
    /// A progress write whose answer is lost (or comes after the timeout) may still land, as on NATS; off, such
    /// a write is lost instead. On in most seeds (`sim/tests/notifier_scenarios.rs`,
    /// `a_claim_whose_write_timed_out_but_landed_is_released_when_its_object_moves`, is the bug it found).
    pub ambiguous_writes: bool,
    pub faults: Vec<FaultKind>,
    pub fault_every_ms: u64,
    pub fault_min_ms: u64,
    pub fault_max_ms: u64,
    pub pause_max_ms: u64,
}

impl NotifyParams {
    /// No notifiers (and one healthy endpoint nobody sends to).
    pub fn none() -> NotifyParams {
        NotifyParams::scripted(0, 1)
    }

    /// For scenarios: `notifiers` slots (none started), `endpoints` healthy endpoints, quick retries, no faults.
    pub fn scripted(notifiers: usize, endpoints: usize) -> NotifyParams {
        NotifyParams {
            notifiers,
            endpoints: (0..endpoints).map(|_| EndpointParams::ok()).collect(),
            start_max_ms: 0,
            concurrency: 4,
            give_up_ms: GIVE_UP_NEVER_MS,
            retry_base_ms: 500,
            retry_max_ms: 8_000,
            claim_recheck_ms: 1_000,
            max_pending: 20_000,
            replay_chunk: 1000,
            max_held: 10_000,
            leave_timeout_ms: 10_000,
            store_timeout_ms: 2_000,
            send_timeout_ms: 3_000,
            ambiguous_writes: false,
            faults: Vec::new(),
            fault_every_ms: 5_000,
            fault_min_ms: 1_000,
            fault_max_ms: 1_000,
            pause_max_ms: 1_000,
        }
    }

    pub fn draw(p: &Params) -> NotifyParams {
        let mut r = stream(p.seed, Stream::Params, 4);
        let notifiers = if r.random_bool(0.15) { 0 } else { r.random_range(1..=4) };
        let send_timeout_ms = r.random_range(1..=5u64) * 1_000;
        let retry_base_ms = r.random_range(1..=10u64) * 100;
        let retry_max_ms = (r.random_range(2..=16u64) * 1_000).max(retry_base_ms);
        let give_up_ms = if r.random_bool(0.85) { GIVE_UP_NEVER_MS } else { r.random_range(5..=60u64) * 1_000 };
        let endpoints = (0..r.random_range(1..=3))
            .map(|_| EndpointParams::draw(&mut r, send_timeout_ms, retry_max_ms, p.safety_ms))
            .collect();
        let faults: Vec<FaultKind> = FaultKind::NOTIFIER.iter().copied().filter(|_| r.random_bool(0.6)).collect();
        let fault_min_ms = r.random_range(200..=2_000u64);
        // Small queues too, with a small or a large replay chunk (the core raises a queue too small for a
        // resume: `sim/tests/notifier_scenarios.rs`, `a_replay_larger_than_the_queue_does_not_overflow_forever`).
        let (max_pending, replay_chunk) =
            [(20_000, 1_000), (20_000, 1_000), (40, 1_000), (40, 5)][r.random_range(0..4)];
        NotifyParams {
            notifiers,
            endpoints,
            start_max_ms: pick_u64(&mut r, &[0, 5_000, 20_000]),
            concurrency: pick_u64(&mut r, &[1, 2, 4, 16]) as usize,
            give_up_ms,
            retry_base_ms,
            retry_max_ms,
            claim_recheck_ms: pick_u64(&mut r, &[200, 1_000]),
            max_pending,
            replay_chunk,
            max_held: pick_u64(&mut r, &[10_000, 10_000, 10_000, 15]) as usize,
            leave_timeout_ms: pick_u64(&mut r, &[10_000, 3_000]),
            store_timeout_ms: r.random_range(1..=5u64) * 1_000,
            send_timeout_ms,
            ambiguous_writes: r.random_bool(0.7),
            faults,
            fault_every_ms: r.random_range(2..=20u64) * 1_000,
            fault_min_ms,
            fault_max_ms: fault_min_ms + r.random_range(0..=3u64) * p.ttl_ms,
            pause_max_ms: p.ttl_ms * r.random_range(1..=3u64),
        }
    }

    /// Nothing is given up in a run this long.
    pub fn gives_up_never(&self) -> bool {
        self.give_up_ms >= GIVE_UP_NEVER_MS
    }
}

impl fmt::Display for NotifyParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.notifiers == 0 {
            return write!(f, "  notifiers: none");
        }
        let eps: Vec<String> = self.endpoints.iter().enumerate().map(|(i, e)| format!("hook{}: {e}", i + 1)).collect();
        let faults: Vec<String> = self.faults.iter().map(|k| format!("{k:?}")).collect();
        let give_up = if self.gives_up_never() { "never".to_string() } else { format!("{}ms", self.give_up_ms) };
        writeln!(
            f,
            "  notifiers: {} starting within {}ms, concurrency={} give_up={give_up} retry={}..{}ms claim_recheck={}ms max_pending={} replay_chunk={} max_held={} leave_timeout={}ms store_timeout={}ms send_timeout={}ms",
            self.notifiers,
            self.start_max_ms,
            self.concurrency,
            self.retry_base_ms,
            self.retry_max_ms,
            self.claim_recheck_ms,
            self.max_pending,
            self.replay_chunk,
            self.max_held,
            self.leave_timeout_ms,
            self.store_timeout_ms,
            self.send_timeout_ms
        )?;
        writeln!(f, "  endpoints: {}", eps.join("; "))?;
        write!(
            f,
            "  notifier faults on: [{}] every~{}ms lasting {}..{}ms pause<={}ms",
            faults.join(","),
            self.fault_every_ms,
            self.fault_min_ms,
            self.fault_max_ms,
            self.pause_max_ms
        )
    }
}

/// What an endpoint does, drawn per seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointKind {
    Ok,
    /// Bad periods of 5xx (and some 302 or 400), or of refused connections (`connect`).
    Failing {
        connect: bool,
    },
    Slow,
    /// Bad periods of 429 with `Retry-After`.
    RateLimited,
    /// 410 from `gone_at_ms` on.
    Gone,
}

#[derive(Clone, Copy, Debug)]
pub struct EndpointParams {
    pub kind: EndpointKind,
    /// Failing and rate-limited endpoints: mean length of a healthy period, and the longest bad one.
    pub healthy_mean_ms: u64,
    pub bad_max_ms: u64,
    /// Slow endpoints take up to this long to answer (past the heal, at most half the send timeout).
    pub slow_max_ms: u64,
    /// The 429's `Retry-After`, in whole seconds as HTTP has it.
    pub retry_after_s: u64,
    pub gone_at_ms: u64,
}

impl EndpointParams {
    pub fn ok() -> EndpointParams {
        EndpointParams {
            kind: EndpointKind::Ok,
            healthy_mean_ms: 10_000,
            bad_max_ms: 5_000,
            slow_max_ms: 1_000,
            retry_after_s: 2,
            gone_at_ms: u64::MAX,
        }
    }

    /// One endpoint's behaviour; `send_timeout_ms` and `retry_max_ms` are the notifiers', `safety_ms` the
    /// length of the safety phase.
    pub fn draw(r: &mut ChaCha8Rng, send_timeout_ms: u64, retry_max_ms: u64, safety_ms: u64) -> EndpointParams {
        let kind = match r.random_range(0..100) {
            0..=34 => EndpointKind::Ok,
            35..=49 => EndpointKind::Failing { connect: false },
            50..=59 => EndpointKind::Failing { connect: true },
            60..=74 => EndpointKind::Slow,
            75..=89 => EndpointKind::RateLimited,
            _ => EndpointKind::Gone,
        };
        EndpointParams {
            kind,
            healthy_mean_ms: r.random_range(1..=20u64) * 1_000,
            bad_max_ms: r.random_range(1..=20u64) * 1_000,
            // Sometimes past the send timeout (a timeout although the endpoint took it).
            slow_max_ms: r.random_range(send_timeout_ms / 4..=send_timeout_ms * 3 / 2),
            // Within the notifiers' longest backoff, so the wait they honour is the one asked for.
            retry_after_s: r.random_range(1..=(retry_max_ms / 1_000).clamp(1, 5)),
            gone_at_ms: r.random_range(0..=safety_ms.max(1)),
        }
    }
}

impl fmt::Display for EndpointParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            EndpointKind::Ok => write!(f, "ok"),
            EndpointKind::Failing { connect } => write!(
                f,
                "failing ({}) ~{}ms healthy, up to {}ms bad",
                if connect { "refused" } else { "5xx" },
                self.healthy_mean_ms,
                self.bad_max_ms
            ),
            EndpointKind::Slow => write!(f, "slow (up to {}ms)", self.slow_max_ms),
            EndpointKind::RateLimited => write!(
                f,
                "429 Retry-After {}s ~{}ms healthy, up to {}ms limited",
                self.retry_after_s, self.healthy_mean_ms, self.bad_max_ms
            ),
            EndpointKind::Gone => write!(f, "410 from {}ms", self.gone_at_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `scripts/test.sh` sweeps (seeds 1..=200) exercises of the notifiers.
    #[test]
    fn the_ci_sweep_runs_notifiers_in_most_seeds_with_every_endpoint_kind_and_fault() {
        let drawn: Vec<NotifyParams> = (1..=200).map(|seed| Params::draw(seed).notify).collect();
        let with = drawn.iter().filter(|n| n.notifiers > 0).count();
        assert!((150..200).contains(&with), "{with} of 200 seeds run notifiers (and some none)");
        for kind in [EndpointKind::Ok, EndpointKind::Slow, EndpointKind::RateLimited, EndpointKind::Gone] {
            assert!(drawn.iter().any(|n| n.notifiers > 0 && n.endpoints.iter().any(|e| e.kind == kind)), "{kind:?}");
        }
        for connect in [false, true] {
            let kind = EndpointKind::Failing { connect };
            assert!(drawn.iter().any(|n| n.notifiers > 0 && n.endpoints.iter().any(|e| e.kind == kind)));
        }
        for f in FaultKind::NOTIFIER {
            assert!(drawn.iter().any(|n| n.notifiers > 0 && n.faults.contains(&f)), "{f:?}");
        }
        assert!(drawn.iter().any(|n| n.notifiers == 4) && drawn.iter().any(|n| n.notifiers == 1));
        assert!(drawn.iter().any(|n| n.notifiers > 0 && !n.gives_up_never()), "some seeds give up");
        assert!(drawn.iter().any(|n| n.notifiers > 0 && n.max_pending < 100), "some seeds overflow");
    }
}

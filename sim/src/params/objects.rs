//! What a seed draws of its objects: the definitions of the workload's puts (from the workload's stream), with
//! what some of them carry: [`MARKER`], which the sinks' database refuses, and [`SECRET`], a probe's credential
//! that no sink row or notification may show.

use super::{mix, stream, Params, Stream};
use jaque_core::{ObjectDef, ObjectId, Probe};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// What the database refuses in an output or a definition (think: bytes its encoding cannot hold).
pub const MARKER: &str = "REFUSE!";

/// The credential in the probe url of every fourth object of the workload (`secret_def`): kept in the log, and
/// in no sink row (definitions show it as `***`; the engine scrubs it from the outputs a worker echoes it in).
pub const SECRET: &str = "s1m-s3cret";

/// Whether object `i`'s probe carries [`SECRET`].
pub(crate) fn secret_def(i: usize) -> bool {
    i.is_multiple_of(4)
}

/// Whether object `i`'s definition carries what the database refuses (seeds with refused definitions on).
pub(crate) fn refused_def(params: &Params, i: usize) -> bool {
    params.sinks > 0 && params.sink.refuse_defs && mix(params.seed ^ 0xdef ^ i as u64).is_multiple_of(5)
}

/// The definitions of the object pool's first puts (`o0`, `o1`, ...), and the workload's stream past them.
pub(crate) fn first_defs(params: &Params) -> (ChaCha8Rng, Vec<ObjectDef>) {
    let mut rng = stream(params.seed, Stream::Workload, 0);
    let defs = (0..params.objects).map(|i| draw_def(&mut rng, params, i)).collect();
    (rng, defs)
}

/// One object definition, drawn from the workload's stream `r` (the first puts, and every later put).
pub(crate) fn draw_def(r: &mut ChaCha8Rng, p: &Params, i: usize) -> ObjectDef {
    let interval_ms = r.random_range(p.interval_ms.0..=p.interval_ms.1.max(p.interval_ms.0)) / 100 * 100;
    let interval_ms = interval_ms.max(100);
    let marker = if refused_def(p, i) { MARKER } else { "" };
    // Every fourth object's probe carries a credential (an http url's userinfo), which the log keeps and no
    // sink row may show (`world/checks/sink_store.rs`), nor any output the engine writes (its worker echoes it).
    let probe = if secret_def(i) {
        Probe::Http { url: format!("http://u:{}@{marker}host{i}/", SECRET).into(), expect_status: None }
    } else {
        Probe::Tcp { addr: format!("{marker}host{i}:80") }
    };
    let timeout_ms = r.random_range(1..=interval_ms.min(2_000));
    let mut def = ObjectDef { probe, interval_ms, timeout_ms, ..ObjectDef::UNSET };
    // The alert rules (cluster format 3), by a hash and not a draw, so the workload's stream stays as it was; not
    // where builds of older formats take part (their cluster refuses such a put until the format moves up).
    if !p.versions.is_mixed() {
        let h = mix(p.seed ^ 0xa1e7 ^ ((i as u64) << 20) ^ interval_ms);
        def.max_attempts = [None, Some(1), Some(2), Some(4)][(h % 4) as usize];
        def.recovery_attempts = [None, None, Some(2), Some(1)][(h >> 8) as usize % 4];
        def.flapping = (h >> 16).is_multiple_of(8).then_some(false);
        // Labels on half the objects: folded by every reader, held to agree (2), stored by the sinks (10).
        if (h >> 40).is_multiple_of(2) {
            let env = ["prod", "staging"][(h >> 41) as usize % 2];
            let pairs = [("env".to_string(), env.to_string()), ("example.com/team".to_string(), format!("t{}", i % 3))];
            def.labels = jaque_core::labels::Labels::new(pairs.into()).expect("valid labels");
        }
        if (h >> 24).is_multiple_of(3) {
            def.retry_interval_ms = Some(timeout_ms.max(100) + (h >> 32) % (interval_ms - timeout_ms.max(100) + 1));
        }
        // Parents (cluster format 4) on a third of the objects where the seed changes the policy (so pinned
        // seeds, which change none, draw the puts they drew): the next object or two, which may not exist yet.
        if p.policy_changes > 0.0 && (h >> 48).is_multiple_of(3) && p.objects > 1 {
            let n = p.objects;
            def.parents = (1..=1 + (h >> 50) as usize % 2)
                .map(|k| ObjectId::new(format!("o{}", (i + k) % n)).expect("valid object id"))
                .filter(|o| o.as_str() != format!("o{i}"))
                .collect();
        }
    }
    def
}

//! Prometheus text exposition, and the one counter every part of the process shares: messages that could not
//! be decoded. The page's names are a contract: `jaque_engine_stale_epoch_total`,
//! `jaque_engine_commands_forwarded_total{outcome}`, `jaque_engine_not_owned_total`. Each part of the process
//! exposes its own metrics beside its code (a role's from its core's counters); the HTTP side puts them together.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

static WIRE_ERRORS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Counts a message that could not be decoded and was skipped.
pub fn wire_error(what: &'static str) {
    *WIRE_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).entry(what).or_default() += 1;
}

/// A text exposition being written.
#[derive(Default)]
pub struct Exposition(pub String);

impl Exposition {
    pub fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
            let _ = writeln!(self.0, "{name}{{{}}} {value}", l.join(","));
        }
    }

    /// A histogram in seconds from counts per bucket in milliseconds (`counts[i]` at most `bounds_ms[i]`, the
    /// last one past every bound), cumulated as Prometheus wants them.
    pub fn histogram_ms(&mut self, name: &str, help: &str, bounds_ms: &[u64], counts: &[u64], sum_ms: u64) {
        self.header(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0;
        for (bound, n) in bounds_ms.iter().zip(counts) {
            cumulative += n;
            let le = format!("{}", *bound as f64 / 1000.0);
            self.sample(&bucket, &[("le", &le)], cumulative);
        }
        let count: u64 = counts.iter().sum();
        self.sample(&bucket, &[("le", "+Inf")], count);
        let _ = writeln!(self.0, "{name}_sum {}", sum_ms as f64 / 1000.0);
        self.sample(&format!("{name}_count"), &[], count);
    }

    pub fn one(&mut self, name: &str, kind: &str, help: &str, value: u64) {
        self.header(name, kind, help);
        self.sample(name, &[], value);
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `jaque_wire_decode_errors_total{what}`: the messages this process could not decode, by kind.
pub fn expose_wire_errors(out: &mut Exposition) {
    out.header("jaque_wire_decode_errors_total", "counter", "Messages that could not be decoded and were skipped.");
    let errors = WIRE_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if errors.is_empty() {
        out.sample("jaque_wire_decode_errors_total", &[("what", "any")], 0);
    }
    for (what, n) in errors {
        out.sample("jaque_wire_decode_errors_total", &[("what", what)], n);
    }
}

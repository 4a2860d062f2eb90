//! `jaque silence list|create|expire`: the silences of the notification policy (issue 35) through
//! `GET /api/silences`, `POST /api/silences` and `DELETE /api/silences/{name}` (which expires one: it ends now and
//! stays listed, not active, for 7 days).

use super::{id_path, json, reason, table, Api, Failure, Output};
use serde_json::{Map, Value};
use std::io::Write;

#[derive(clap::Subcommand, Debug)]
pub enum Silence {
    /// Every silence the cluster holds (those that ended are kept for 7 days).
    List {
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Silence the objects a selector picks, from now (or --starts-at) for a duration.
    Create {
        /// A label selector (`team=db,env in (prod,staging)`): the objects it silences.
        #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
        selector: String,
        /// How long it lasts (`2h`, `30m`, `1d`).
        #[arg(long, value_name = "DURATION")]
        duration: String,
        /// When it starts, RFC 3339 in UTC (`2026-01-31T22:00:00Z`); default: now.
        #[arg(long = "starts-at", value_name = "TIME")]
        starts_at: Option<String>,
        /// Who sets it (default: $USER).
        #[arg(long, env = "USER", hide_env_values = true, value_name = "NAME")]
        author: String,
        /// Why.
        #[arg(long, default_value = "")]
        comment: String,
        /// Its name (1 to 63 of a-z 0-9 - _ .); without one the cluster gives it one (`silence-` and 16 hex digits).
        #[arg(long)]
        name: Option<String>,
    },
    /// End silences now.
    Expire {
        /// Silence names.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

pub async fn run(api: &Api, out: &mut impl Write, what: Silence) -> Result<u8, Failure> {
    match what {
        Silence::List { output } => {
            let a = api.send(reqwest::Method::GET, "/api/silences").await?;
            if a.status != 200 {
                return Err(Failure { code: 1, message: format!("silences: {}", reason(a.status, &a.body)) });
            }
            print(out, &a.body, output);
            Ok(0)
        }
        Silence::Create { selector, duration, starts_at, author, comment, name } => {
            // Checked here as the server checks them, so a typo is a bad command line (2), not a refusal.
            if let Err(e) = jaque_core::labels::Selector::parse(&selector) {
                return Err(super::usage(format!("-l {selector:?}: {e}")));
            }
            if let Err(e) = humantime::parse_duration(&duration) {
                return Err(super::usage(format!("--duration {duration:?} is not a duration ({e}); write e.g. 2h")));
            }
            if let Some(t) = &starts_at {
                crate::sink::store::parse_rfc3339_ms(t).map_err(|e| super::usage(format!("--starts-at: {e}")))?;
            }
            if let Some(n) = &name {
                jaque_core::policy::Name::new(n.as_str()).map_err(|e| super::usage(format!("--name: {e}")))?;
            }
            let mut body = Map::new();
            for (k, v) in [("selector", Some(selector)), ("duration", Some(duration)), ("starts_at", starts_at)]
                .into_iter()
                .chain([("author", Some(author)), ("comment", Some(comment)), ("name", name)])
            {
                if let Some(v) = v {
                    body.insert(k.into(), Value::String(v));
                }
            }
            let a = api.send_body(reqwest::Method::POST, "/api/silences", Some(&Value::Object(body)), "").await?;
            if a.status != 200 {
                return Err(Failure { code: 1, message: format!("silence: {}", reason(a.status, &a.body)) });
            }
            let _ = writeln!(out, "silence {}: created", a.body["name"].as_str().unwrap_or("?"));
            Ok(0)
        }
        Silence::Expire { names } => {
            let mut failed = 0;
            for name in &names {
                let path = format!("/api/silences/{}", id_path(name));
                let a = api.send(reqwest::Method::DELETE, &path).await?;
                if a.status == 200 {
                    let _ = writeln!(out, "silence {name}: expired");
                } else {
                    failed += 1;
                    eprintln!("jaque: silence {name}: expire: {}", reason(a.status, &a.body));
                }
            }
            Ok(u8::from(failed > 0))
        }
    }
}

fn print(out: &mut impl Write, body: &Value, output: Output) {
    if output == Output::Json {
        return json(out, body);
    }
    let cell = |s: &Value, k: &str| match s[k].as_str() {
        Some("") | None => "-".to_string(),
        Some(v) => v.to_string(),
    };
    let rows: Vec<Vec<String>> = body["silences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let mut row = ["name", "selector", "starts_at", "ends_at"].map(|k| cell(s, k)).to_vec();
            row.push(if s["active"] == true { "yes" } else { "no" }.into());
            row.push(cell(s, "author"));
            if output == Output::Wide {
                row.push(cell(s, "comment").replace('\n', " "));
            }
            row
        })
        .collect();
    let mut header = vec!["NAME", "SELECTOR", "STARTS", "ENDS", "ACTIVE", "AUTHOR"];
    if output == Output::Wide {
        header.push("COMMENT");
    }
    table(out, &header, &rows);
}

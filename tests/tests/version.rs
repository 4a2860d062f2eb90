//! `jaque --version` (issue 33): the build, and the version of everything it writes and reads, each line held to
//! what the binary really writes: the cluster format and snapshot lines are `jaque_core::format::describe()`, the
//! data-dir version is the one a new `-data-dir` is marked with, the sink's schema version the one a new store
//! records. A `-data-dir` of a newer version is refused naming it.

use jaque_tests::{jaque_bin, jaque_refuses_config, Jaque};
use std::process::Command;

/// What `jaque <flag>` prints, after checking it exits 0 and prints nothing on stderr.
fn version(flag: &str) -> String {
    let out = Command::new(jaque_bin()).arg(flag).output().expect("running jaque");
    assert!(out.status.success(), "jaque {flag}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "jaque {flag}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The number after `prefix` at the start of one of `text`'s lines, and the rest of that line.
fn line_number<'a>(text: &'a str, prefix: &str) -> (u32, &'a str) {
    let line = text.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no {prefix:?}: {text}"));
    let (n, rest) = line.split_once(' ').unwrap_or((line, ""));
    (n.parse().unwrap_or_else(|_| panic!("{prefix}{line}")), rest)
}

#[test]
fn version_in_every_spelling_prints_the_build_and_the_formats_it_reads_and_writes() {
    let text = version("--version");
    for flag in ["-version", "-V"] {
        assert_eq!(version(flag), text, "{flag} prints what --version does");
    }
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    let build = lines[0].strip_prefix(concat!("jaque ", env!("CARGO_PKG_VERSION"), " (commit ")).expect(&text);
    let commit = build.strip_suffix(')').expect(&text);
    assert!(
        commit == "unknown" || commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "a short hash or unknown: {commit}"
    );
    assert_eq!(lines[1..3].join("\n"), jaque_core::format::describe());
    assert_eq!(line_number(&text, "cluster format ").0, jaque_core::format::CLUSTER_FORMAT);
    assert_eq!(line_number(&text, "snapshot version ").0, jaque_core::format::SNAPSHOT_VERSION);

    // The data-dir version is the one a new directory is marked with.
    let (data_dir, reads) = line_number(&text, "data-dir version ");
    assert_eq!(reads, format!("(reads 1..={data_dir})"));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let j = Jaque::start("data-dir", &["-target", "engine,worker,ui", "-queue", "memory", "-data-dir", d]);
    j.wait_ready();
    let marker = std::fs::read_to_string(dir.path().join("FORMAT")).unwrap();
    assert_eq!(marker, format!("jaque data-dir {data_dir}\nwritten by {}\n", lines[0]));

    // The sink's schema version is the one a new store records.
    let (schema, reads) = line_number(&text, "sink schema version ");
    assert_eq!(reads, format!("(reads 1..={schema})"));
    let db = dir.path().join("sink.db");
    let store = format!("sqlite://{}", db.display());
    let j = Jaque::start("sink", &["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", &store]);
    j.wait_ready();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let recorded: i64 = rt.block_on(async {
        let opts = store.parse::<sqlx::sqlite::SqliteConnectOptions>().unwrap().read_only(true);
        let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
        let (v,): (i64,) = sqlx::query_as("SELECT max(version) FROM jaque_schema").fetch_one(&pool).await.unwrap();
        pool.close().await;
        v
    });
    assert_eq!(recorded, i64::from(schema));
}

#[test]
fn a_data_dir_of_a_newer_version_is_refused_with_exit_2_naming_the_build_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("FORMAT"), "jaque data-dir 99\nwritten by jaque 9.1.0 (commit 0123abc)\n").unwrap();
    let d = dir.path().to_str().unwrap();
    let out = jaque_refuses_config(&["-target", "engine,worker,ui", "-queue", "memory", "-data-dir", d]);
    assert!(out.contains("was written by a newer jaque (data-dir version 99, jaque 9.1.0 (commit 0123abc))"), "{out}");
    let (reads, _) = line_number(&version("--version"), "data-dir version ");
    assert!(out.contains(&format!("reads up to {reads}")), "{out}");
    let entries: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(entries, ["FORMAT"], "nothing made in a directory this build cannot read");
}

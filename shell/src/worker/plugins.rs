//! What an exec plugin may be and what it gets, after Nagios' security guidance: a `-plugin-dir` only root or the
//! worker's own user can change (checked at start, a refusal like any bad flag), plugin files likewise (checked
//! before each run), a minimal environment (none of the worker's tokens or passwords), and a bounded read of its
//! output (a plugin that writes gigabytes costs the worker 64 KiB).

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of a plugin's standard output the worker keeps; the rest is read and discarded (and counted in
/// `jaque_worker_plugin_output_discarded_bytes_total`). Its first line is the check's output.
pub const OUTPUT_MAX: usize = 64 * 1024;

/// The variables a plugin inherits from the worker, when the worker has them; nothing else is passed.
pub const ENV_PASSED: [&str; 5] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ"];

/// `PATH` for a plugin when the worker has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A plugin's whole environment.
pub fn env() -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> =
        ENV_PASSED.iter().filter_map(|k| std::env::var_os(k).map(|v| (*k, v))).collect();
    if !env.iter().any(|(k, _)| *k == "PATH") {
        env.push(("PATH", DEFAULT_PATH.into()));
    }
    env
}

/// Why a file or directory must not be trusted with plugins: owned by someone other than root or this process's
/// user, or writable by its group or others. `None`: fine.
fn untrusted(meta: &std::fs::Metadata) -> Option<String> {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    let (owner, mode) = (meta.uid(), meta.mode());
    if owner != 0 && owner != me {
        return Some(format!("is owned by uid {owner}, neither root nor this worker's user (uid {me})"));
    }
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 { "anyone" } else { "its group" };
        return Some(format!("can be written by {who} (mode {:o})", mode & 0o7777));
    }
    None
}

/// The start-time check of `-plugin-dir`: an error naming the fix, or `Ok`.
pub fn check_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("-plugin-dir: {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("-plugin-dir: {} is not a directory", dir.display()));
    }
    match untrusted(&meta) {
        None => Ok(()),
        Some(why) => Err(format!(
            "-plugin-dir: {} {why}; whoever can change it can run anything as this worker. Make it owned by root \
             or this worker's user and writable by the owner only, e.g. `chown root: {0} && chmod 755 {0}`",
            dir.display()
        )),
    }
}

/// The check before each run of a plugin (the file it points to, for a symlink): the check's output when it
/// must not run.
pub fn check_file(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("plugin {}: {e}", path.display()))?;
    match untrusted(&meta) {
        None => Ok(()),
        Some(why) => Err(format!(
            "plugin {} {why}: not run; make it owned by root or the worker's user and writable by the owner only \
             (chmod 755)",
            path.display()
        )),
    }
}

/// Reads `r` to its end, keeping at most `max` bytes: the kept bytes and how many more were discarded. Memory
/// stays at `max` plus a small buffer however much comes.
pub async fn read_capped(mut r: impl AsyncRead + Unpin, max: usize) -> std::io::Result<(Vec<u8>, u64)> {
    let mut kept = Vec::new();
    (&mut r).take(max as u64).read_to_end(&mut kept).await?;
    let discarded = tokio::io::copy(&mut r, &mut tokio::io::sink()).await?;
    Ok((kept, discarded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn a_long_output_is_cut_and_the_rest_counted() {
        let data = vec![b'x'; 200_000];
        let (kept, discarded) = read_capped(&data[..], OUTPUT_MAX).await.unwrap();
        assert_eq!((kept.len(), discarded), (OUTPUT_MAX, 200_000 - OUTPUT_MAX as u64));
        let (kept, discarded) = read_capped(&b"OK - fine\n"[..], OUTPUT_MAX).await.unwrap();
        assert_eq!((kept.as_slice(), discarded), (&b"OK - fine\n"[..], 0));
    }

    #[test]
    fn a_dir_others_can_write_is_refused_with_the_fix() {
        let d = tempfile::tempdir().unwrap();
        check_dir(d.path()).unwrap();
        for (mode, who) in [(0o775, "its group"), (0o777, "anyone"), (0o1777, "anyone")] {
            std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let e = check_dir(d.path()).unwrap_err();
            assert!(e.contains(who) && e.contains("chmod 755"), "{e}");
        }
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = d.path().join("p");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o757)).unwrap();
        assert!(check_file(&f).unwrap_err().contains("anyone"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        check_file(&f).unwrap();
        assert!(check_dir(&f).unwrap_err().contains("not a directory"));
    }

    #[test]
    fn the_environment_is_the_few_named_variables() {
        let env = env();
        assert!(env.iter().all(|(k, _)| ENV_PASSED.contains(k)), "{env:?}");
        assert!(env.iter().any(|(k, _)| *k == "PATH"));
    }
}

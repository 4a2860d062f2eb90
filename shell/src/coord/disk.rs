//! `-data-dir DIR`: the log, the snapshots and the notifiers' progress records of `-coordination memory` on
//! local disk, so that a single-process install keeps its objects and history across restarts and crashes.
//! `MemStore` still serves everything from memory; this module owns the files: loading them at start (before
//! the runtime, so a directory that cannot be used is refused with exit 2), and the one writer thread that
//! appends, fsyncs and compacts them.
//!
//! Layout of DIR:
//! - `lock`: held with `flock` while a process uses DIR (its pid inside, for the message that refuses another);
//! - `log/<first position>.seg`: the log's entries in order. A new segment starts at every start, after every
//!   stored snapshot and at 64 MiB, so that compaction frees space by deleting whole files;
//! - `log/epochs`: the epoch records of the segments compaction deleted (the core never purges them, and the
//!   next proposal's compare-and-set is made against the last one);
//! - `snapshots/<position>.snap`: the newest two snapshots;
//! - `records`: every write of a progress record, appended; rewritten with the live ones when mostly stale.
//!
//! - `FORMAT`: the directory's version (below);
//!
//! **Version.** `FORMAT` holds `jaque data-dir <n>` on its first line, and on the next which build wrote it
//! (for the message that refuses it, and for people). It versions the layout above and the framing below, the
//! whole directory, so it is a file of its own rather than a header in each: a build reads it first, right after
//! taking the lock and before any other file, and refuses a version newer than `DataDir::VERSION` without
//! touching anything (an older build must not cut what it misreads as a torn tail). Plain text, so `cat
//! DIR/FORMAT` answers which build a backup needs. It is written whole (a temporary file renamed into place)
//! when a directory is made, and when a directory without it is opened: one that holds a log without a `FORMAT`
//! was written by a build before v0.1.0, which wrote version 1. What a log entry or a snapshot *says* is
//! versioned apart, by the cluster format and the snapshot version (`jaque_core::format`): a new kind of event
//! changes no data-dir version, and the data-dir version changes only when the files or their framing do
//! (`docs/upgrading.md`).
//!
//! **Version 1's bytes.** No record carries a version of its own; these are version 1's. Integers are little
//! endian; a checksum is CRC-32C (Castagnoli). Every record in `log/*.seg`, `log/epochs` and `records` is a
//! frame: the body's length (u32), the checksum of the body (u32), the body. A log entry's body is its position
//! (u64) and its wire bytes (`wire::encode` of the entry: JSON, `docs/wire.md`); `log/epochs` holds the same
//! bodies, epoch records only. A progress record's body is its revision (u64), its key's length (u32), the key
//! (UTF-8) and the value (the bytes a NATS bucket would hold). A snapshot file is one frame with a u64 length:
//! the length (u64) and checksum (u32) of the body, then the body, the snapshot's position (u64) and its bytes
//! (`wire::encode_snapshot`). `lock` holds the pid in decimal and a newline.
//!
//! **Durability.** The store delivers an entry to the log's followers, and answers an append, a proposal or a
//! record write, only once this writer has fsync'd it. An engine answers `applied` after it reads its own
//! event back, so nothing acknowledged is lost however the process ends. What arrives while an fsync runs is
//! written as the next batch with one fsync (group commit). A failed write or fsync ends the process (exit 1):
//! after a failed fsync the kernel may have dropped the pages, so carrying on could call durable what is not;
//! the next start reads what the files hold.
//!
//! **After a crash.** Only the newest segment and `records` are appended to (every other segment was fsync'd
//! whole before the next began, and `epochs` and snapshots are renamed into place whole), so only they can end
//! in a partial frame: that torn tail is cut at start and logged. A bad frame anywhere else, or one with a valid
//! later frame after it (damage, not an interrupted append), is refused (exit 2) with the file and the offset:
//! the process never drops silently what it may have acknowledged.

use super::events::Held;
use super::snapshot::{SnapshotBytes, SNAPSHOTS_KEPT};
use jaque_core::wire;
use jaque_core::LogEntry;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write as _};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use tokio::sync::{oneshot, watch};

/// Ends the process on a failure it cannot go on from (the data directory can no longer be written): logged,
/// exit 1, so a supervisor restarts it.
fn fatal(msg: &str) -> ! {
    tracing::error!("{msg}");
    std::process::exit(1)
}

const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
const FRAME_HEADER: usize = 8;
/// A segment is closed once it holds this much, whatever the snapshots do.
const SEGMENT_BYTES: u64 = 64 << 20;
/// `records` is rewritten once it is this large and four times the size of its live records.
const RECORDS_REWRITE_BYTES: u64 = 1 << 20;

/// The name of the file that holds a data directory's version.
const FORMAT_FILE: &str = "FORMAT";

/// A data directory, locked and read, before its writer starts.
pub struct DataDir {
    path: PathBuf,
    /// Holds the `flock` for as long as the process runs (the writer thread owns it once started).
    lock: File,
    loaded: Loaded,
    writer: Writer,
}

/// What the files hold: the store's state at start.
pub(super) struct Loaded {
    /// The log by position; `Err` for an entry whose frame is whole but whose bytes do not decode (with the
    /// cluster format they say they need, if they say one).
    pub log: BTreeMap<u64, Held>,
    /// The position the next entry gets.
    pub next_seq: u64,
    pub last_epoch_seq: Option<u64>,
    /// Progress records: key -> (value, revision).
    pub records: BTreeMap<String, (Vec<u8>, u64)>,
    /// The highest revision of a record or of the membership an epoch record was read at: the bucket's
    /// revisions continue above it.
    pub rev: u64,
}

/// What the writer has made durable: the log up to `seq`, the records up to revision `rev`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Mark {
    seq: u64,
    rev: u64,
}

/// Work for the writer thread, in the order the store made it.
enum Job {
    Entry {
        seq: u64,
        bytes: Vec<u8>,
        epoch: bool,
    },
    Record {
        rev: u64,
        key: String,
        value: Vec<u8>,
    },
    /// A snapshot was stored: begin a new segment, so the ones before it can go whole.
    Roll,
    Purge {
        below: u64,
        done: oneshot::Sender<Freed>,
    },
    Close {
        done: oneshot::Sender<()>,
    },
}

/// What a purge deleted.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Freed {
    pub segments: usize,
    pub bytes: u64,
}

/// The store's handle on the writer thread.
#[derive(Clone)]
pub(super) struct DiskLog {
    jobs: mpsc::Sender<Job>,
    durable: watch::Receiver<Mark>,
    path: PathBuf,
}

/// Waits until the writer has fsync'd a log position or a record revision.
pub struct Durable {
    durable: watch::Receiver<Mark>,
    seq: u64,
    rev: u64,
}

impl Durable {
    pub async fn wait(mut self) -> Result<(), String> {
        let (seq, rev) = (self.seq, self.rev);
        match self.durable.wait_for(|m| m.seq >= seq && m.rev >= rev).await {
            Ok(_) => Ok(()),
            Err(_) => Err("the data directory's writer has stopped".into()),
        }
    }
}

impl DataDir {
    /// The data-dir version this build writes (the layout and framing the module documentation describes).
    pub const VERSION: u32 = 1;
    /// The oldest data-dir version this build reads: what a directory without `FORMAT` is.
    pub const OLDEST_VERSION: u32 = 1;

    /// Makes DIR if it is missing, locks it, and reads what it holds (cutting a torn tail). The error says
    /// what is wrong with DIR and what to do; the caller refuses to start with it.
    pub fn open(path: &Path) -> Result<DataDir, String> {
        let shown = path.display();
        if path.exists() && !path.is_dir() {
            return Err(format!("-data-dir {shown} is not a directory"));
        }
        fs::create_dir_all(path).map_err(|e| format!("-data-dir {shown} cannot be made: {e}"))?;
        // A version this build cannot read is refused before the lock writes its pid: nothing in DIR changes.
        // Read again under the lock, which a build upgrading DIR holds while it does.
        read_format(path)?;
        let lock = lock(path)?;
        let marked = read_format(path)?;
        // Before anything below makes a file: whether a directory without `FORMAT` holds what a build before
        // v0.1.0 wrote, or nothing yet.
        let unmarked_data = marked.is_none() && ["log", "snapshots", "records"].iter().any(|f| path.join(f).exists());
        let fail = |what: &str, e: io::Error| format!("-data-dir {shown}: {what}: {e}");
        let log_dir = path.join("log");
        let snap_dir = path.join("snapshots");
        for dir in [&log_dir, &snap_dir] {
            fs::create_dir_all(dir).map_err(|e| fail("making a directory", e))?;
        }
        for leftover in [path.join("records.tmp"), log_dir.join("epochs.tmp"), path.join(format!("{FORMAT_FILE}.tmp"))]
        {
            let _ = fs::remove_file(leftover);
        }
        let snapshots = check_snapshots(&snap_dir)?;

        let epochs_path = log_dir.join("epochs");
        let mut kept_epochs = BTreeMap::new();
        if epochs_path.exists() {
            let bytes = fs::read(&epochs_path).map_err(|e| fail("reading log/epochs", e))?;
            let (frames, bad) = frames(&bytes);
            if let Some(at) = bad {
                return Err(damaged(&epochs_path, at, "a frame that does not check"));
            }
            for (_, body) in frames {
                let Some((seq, _)) = entry_body(body) else {
                    return Err(damaged(&epochs_path, 0, "an entry too short to hold its position"));
                };
                kept_epochs.insert(seq, body.to_vec());
            }
        }

        let mut segments = segment_files(&log_dir).map_err(|e| fail("listing log/", e))?;
        let mut log = BTreeMap::new();
        let mut closed = Vec::new();
        let newest = segments.len().checked_sub(1);
        for (i, (first, seg_path)) in segments.drain(..).enumerate() {
            let Some(seg) = load_segment(first, &seg_path, Some(i) == newest, &mut log)? else { continue };
            closed.push(seg);
        }
        for (seq, body) in &kept_epochs {
            log.entry(*seq).or_insert_with(|| decode_entry(*seq, &body[8..]));
        }
        let mut last_epoch_seq = None;
        // Membership revisions continue above every revision an epoch record was read at: an engine whose view
        // is older than the record in force never proposes, so a restart numbering from 0 would never get an
        // epoch of its own.
        let mut members_rev = 0;
        for (seq, entry) in &log {
            if let Ok(LogEntry::Epoch(record)) = entry {
                last_epoch_seq = Some(*seq);
                members_rev = members_rev.max(record.members_rev);
            }
        }
        let last_seq = log.keys().next_back().copied().unwrap_or(0);
        let newest_snapshot = snapshots.last().copied().unwrap_or(0);
        if newest_snapshot > last_seq {
            // New entries must land after every position a reader may start from.
            tracing::warn!(
                snapshot = newest_snapshot,
                last_seq,
                "the newest snapshot is past the log's last entry (log files removed by hand?); the log continues \
                 after the snapshot"
            );
        }
        let next_seq = last_seq.max(newest_snapshot) + 1;

        let records_path = path.join("records");
        let (records, records_rev, records_bytes) = load_records(&records_path)?;
        let rev = records_rev.max(members_rev);
        let records_file =
            OpenOptions::new().create(true).append(true).open(&records_path).map_err(|e| fail("opening records", e))?;
        sync_dir(path).map_err(|e| fail("syncing the directory", e))?;
        let live: BTreeMap<String, (u64, Vec<u8>)> =
            records.iter().map(|(k, (v, rev))| (k.clone(), (*rev, v.clone()))).collect();
        let live_bytes = live.iter().map(|(k, (_, v))| record_frame_len(k, v)).sum();
        // Read whole as the version it is; a version older than this build's would be brought up to it here,
        // before the marker says so (version 1 is the only one yet).
        if marked != Some(DataDir::VERSION) {
            write_format(path).map_err(|e| fail("writing FORMAT", e))?;
            if unmarked_data {
                tracing::info!(
                    dir = %shown,
                    version = DataDir::VERSION,
                    "a data directory without FORMAT, written by a jaque before v0.1.0 (data-dir version 1): read, \
                     and marked"
                );
            }
        }
        tracing::info!(
            dir = %shown,
            entries = log.len(),
            first = log.keys().next().copied().unwrap_or(0),
            last = last_seq,
            segments = closed.len(),
            snapshots = snapshots.len(),
            records = records.len(),
            "data directory read"
        );
        Ok(DataDir {
            path: path.to_path_buf(),
            lock,
            loaded: Loaded { log, next_seq, last_epoch_seq, records, rev },
            writer: Writer {
                log_dir,
                closed,
                open: None,
                kept_epochs,
                records_path,
                records: records_file,
                records_bytes,
                live,
                live_bytes,
                seg_buf: Vec::new(),
                rec_buf: Vec::new(),
                dir_dirty: false,
                mark: Mark { seq: last_seq, rev: records_rev },
            },
        })
    }

    /// Starts the writer thread. `synced` is called from it with the last log position of every batch once
    /// that batch is durable (the store then delivers those entries).
    pub(super) fn start(self, synced: impl Fn(u64) + Send + 'static) -> (Loaded, DiskLog) {
        let (jobs, rx) = mpsc::channel();
        let (mark_tx, durable) = watch::channel(self.writer.mark);
        let (writer, lock, path) = (self.writer, self.lock, self.path);
        let shown = path.display().to_string();
        std::thread::Builder::new()
            .name("jaque-data-dir".into())
            .spawn(move || {
                if let Err(e) = writer.run(lock, rx, mark_tx, synced) {
                    fatal(&format!(
                        "-data-dir {shown}: writing failed: {e}; stopping (what was acknowledged is on disk; free \
                         space or fix the disk, then start again)"
                    ));
                }
            })
            .expect("starting the data directory's writer thread");
        (self.loaded, DiskLog { jobs, durable, path })
    }
}

impl DiskLog {
    /// Queues an entry; it is delivered once `synced` reports its position.
    pub(super) fn entry(&self, seq: u64, entry: &LogEntry) -> Durable {
        let epoch = matches!(entry, LogEntry::Epoch(_));
        let _ = self.jobs.send(Job::Entry { seq, bytes: wire::encode_log_entry(entry), epoch });
        Durable { durable: self.durable.clone(), seq, rev: 0 }
    }

    pub(super) fn record(&self, rev: u64, key: &str, value: &[u8]) -> Durable {
        let _ = self.jobs.send(Job::Record { rev, key: key.to_string(), value: value.to_vec() });
        Durable { durable: self.durable.clone(), seq: 0, rev }
    }

    pub(super) async fn purge(&self, below: u64) -> Result<Freed, String> {
        let (done, rx) = oneshot::channel();
        let _ = self.jobs.send(Job::Purge { below, done });
        rx.await.map_err(|_| "the data directory's writer has stopped".to_string())
    }

    /// Writes what is queued and stops the writer.
    pub(super) async fn close(&self) {
        let (done, rx) = oneshot::channel();
        if self.jobs.send(Job::Close { done }).is_ok() {
            let _ = rx.await;
        }
    }

    /// Stores a snapshot atomically and keeps the newest two; the next entry begins a new segment.
    pub(super) async fn save_snapshot(&self, position: u64, bytes: SnapshotBytes) -> Result<(), String> {
        let dir = self.path.join("snapshots");
        tokio::task::spawn_blocking(move || write_snapshot(&dir, position, bytes))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("writing snapshot {position} in {}: {e}", self.path.display()))?;
        let _ = self.jobs.send(Job::Roll);
        Ok(())
    }

    pub(super) async fn latest_snapshot(&self) -> Result<Option<(u64, Vec<u8>)>, String> {
        let dir = self.path.join("snapshots");
        tokio::task::spawn_blocking(move || read_latest_snapshot(&dir)).await.map_err(|e| e.to_string())?
    }
}

/// Takes the directory's advisory lock, or says who holds it.
fn lock(dir: &Path) -> Result<File, String> {
    let path = dir.join("lock");
    let shown = dir.display();
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("-data-dir {shown} cannot be used: {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns; no memory is shared with the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let pid = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            return Err(format!(
                "-data-dir {shown} is in use by another jaque process{pid}: one process per data directory"
            ));
        }
        return Err(format!("-data-dir {shown}: cannot lock {}: {e}", path.display()));
    }
    file.set_len(0)
        .and_then(|_| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(|e| format!("-data-dir {shown} is not writable: {}: {e}", path.display()))?;
    Ok(file)
}

/// The version in DIR's `FORMAT`, if it has one this build reads; an error naming the build needed if it is
/// newer, or if the file is not a marker jaque wrote.
fn read_format(dir: &Path) -> Result<Option<u32>, String> {
    let path = dir.join(FORMAT_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("-data-dir {}: reading {FORMAT_FILE}: {e}", dir.display())),
    };
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let Some(version) = first.strip_prefix("jaque data-dir ").and_then(|v| v.trim().parse::<u32>().ok()) else {
        return Err(format!(
            "{} does not say `jaque data-dir <version>` (it begins {first:?}): it is not the marker jaque writes, \
             so which files DIR holds, and how, is unknown; restore DIR from a backup",
            path.display()
        ));
    };
    if version > DataDir::VERSION {
        let by = lines.next().and_then(|l| l.strip_prefix("written by ")).map(|b| format!(", {b}")).unwrap_or_default();
        return Err(format!(
            "-data-dir {} was written by a newer jaque (data-dir version {version}{by}); this build (jaque {}) reads \
             up to {}: run the jaque that wrote it or a later one (docs/upgrading.md), or go back to the copy \
             of DIR taken before the upgrade. Nothing in DIR was changed",
            dir.display(),
            crate::cli::BUILD,
            DataDir::VERSION
        ));
    }
    if version < DataDir::OLDEST_VERSION {
        return Err(format!(
            "-data-dir {} holds data-dir version {version}, older than this build reads ({}..={}): start it once \
             with a release that reads both (docs/upgrading.md)",
            dir.display(),
            DataDir::OLDEST_VERSION,
            DataDir::VERSION
        ));
    }
    Ok(Some(version))
}

/// Marks DIR as this build's data-dir version, whole (renamed into place).
fn write_format(dir: &Path) -> io::Result<()> {
    let text = format!("jaque data-dir {}\nwritten by jaque {}\n", DataDir::VERSION, crate::cli::BUILD);
    replace_file(&dir.join(FORMAT_FILE), text.as_bytes())
}

fn damaged(path: &Path, at: usize, what: &str) -> String {
    format!(
        "{} is damaged at byte {at}: {what}. This is not what a crash leaves (only the end of the newest segment \
         is ever cut short), so jaque refuses to start rather than drop entries it may have acknowledged. Restore \
         the data directory from a backup, or, to accept losing everything from that byte on, cut the file there \
         (truncate -s {at} {}) or move it away",
        path.display(),
        path.display()
    )
}

/// The frame at `at` in `bytes`, if it is whole and its checksum matches: its body and where the next begins.
fn frame_at(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(at..at + FRAME_HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    let body = bytes.get(at + FRAME_HEADER..(at + FRAME_HEADER).checked_add(len)?)?;
    (CRC.checksum(body) == crc).then_some((body, at + FRAME_HEADER + len))
}

/// Every good frame from the start, with its offset, and the offset of the first bad one (`None`: the file
/// ends where its last frame does).
fn frames(bytes: &[u8]) -> (Vec<(usize, &[u8])>, Option<usize>) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match frame_at(bytes, at) {
            Some((body, next)) => {
                out.push((at, body));
                at = next;
            }
            None => return (out, Some(at)),
        }
    }
    (out, None)
}

/// Whether a good frame that `follows` accepts starts anywhere after `at`: then the bad frame at `at` is damage
/// inside the file, not the end of an interrupted append.
fn good_frame_after(bytes: &[u8], at: usize, follows: impl Fn(&[u8]) -> bool) -> Option<usize> {
    (at + 1..bytes.len()).find(|&i| frame_at(bytes, i).is_some_and(|(body, _)| follows(body)))
}

fn frame(buf: &mut Vec<u8>, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut digest = CRC.digest();
    for p in parts {
        digest.update(p);
    }
    buf.extend_from_slice(&(len as u32).to_le_bytes());
    buf.extend_from_slice(&digest.finalize().to_le_bytes());
    for p in parts {
        buf.extend_from_slice(p);
    }
}

/// A log entry's body: its position and its wire bytes.
fn entry_body(body: &[u8]) -> Option<(u64, &[u8])> {
    let seq = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
    Some((seq, &body[8..]))
}

fn decode_entry(seq: u64, bytes: &[u8]) -> Held {
    match wire::decode_log_entry(bytes) {
        Ok(entry) => Ok(entry),
        Err(wire::WireError::TooNew { needs }) => {
            tracing::warn!(seq, needs, "a log entry on disk of a cluster format this build does not speak");
            Err(Some(needs))
        }
        Err(e) => {
            tracing::warn!(seq, error = %e, "a log entry on disk that does not decode; readers pass over it");
            crate::metrics::wire_error("log entry");
            Err(None)
        }
    }
}

/// The segment files in log/, by first position.
fn segment_files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match name.strip_suffix(".seg").and_then(|n| n.parse::<u64>().ok()) {
            Some(first) => out.push((first, path)),
            None if name == "epochs" => {}
            None => tracing::warn!(file = %path.display(), "not a log segment; left alone"),
        }
    }
    out.sort();
    Ok(out)
}

/// One segment into `log`. The newest may end in a torn tail, which is cut; an empty newest one is removed.
fn load_segment(
    first: u64,
    path: &Path,
    newest: bool,
    log: &mut BTreeMap<u64, Held>,
) -> Result<Option<Segment>, String> {
    let shown = path.display();
    let bytes = fs::read(path).map_err(|e| format!("reading {shown}: {e}"))?;
    let (frames, bad) = frames(&bytes);
    let mut last = log.keys().next_back().copied().unwrap_or(0);
    let mut seg = Segment { last: first, path: path.to_path_buf(), bytes: 0, epochs: Vec::new() };
    let mut good_end = 0;
    for (at, body) in frames {
        let Some((seq, payload)) = entry_body(body) else {
            return Err(damaged(path, at, "an entry too short to hold its position"));
        };
        if seq <= last || (good_end == 0 && seq != first) {
            return Err(damaged(path, at, &format!("position {seq} out of order (after {last})")));
        }
        let entry = decode_entry(seq, payload);
        if matches!(entry, Ok(LogEntry::Epoch(_))) {
            seg.epochs.push(body.to_vec());
        }
        log.insert(seq, entry);
        last = seq;
        seg.last = seq;
        good_end = at + FRAME_HEADER + body.len();
    }
    if let Some(at) = bad {
        let later = good_frame_after(&bytes, at, |body| entry_body(body).is_some_and(|(seq, _)| seq > last));
        if !newest || later.is_some() {
            return Err(damaged(path, at, "a frame that does not check, with entries after it"));
        }
        let cut = bytes.len() - at;
        tracing::warn!(
            file = %shown,
            at,
            cut_bytes = cut,
            last_position = last,
            "the log's newest segment ends in a torn tail (a write cut short by a crash): cut off; every entry \
             before it is kept, and nothing cut was ever acknowledged"
        );
        let file = OpenOptions::new().write(true).open(path).map_err(|e| format!("opening {shown}: {e}"))?;
        file.set_len(at as u64).and_then(|_| file.sync_all()).map_err(|e| format!("cutting {shown}: {e}"))?;
    }
    if good_end == 0 {
        if !newest {
            return Err(damaged(path, 0, "an empty segment before the newest"));
        }
        fs::remove_file(path).map_err(|e| format!("removing the empty segment {shown}: {e}"))?;
        return Ok(None);
    }
    seg.bytes = good_end as u64;
    Ok(Some(seg))
}

fn record_frame_len(key: &str, value: &[u8]) -> u64 {
    (FRAME_HEADER + 12 + key.len() + value.len()) as u64
}

/// The records file: the last write of every key, the highest revision, and the file's length after a torn
/// tail is cut.
type Records = (BTreeMap<String, (Vec<u8>, u64)>, u64, u64);

fn load_records(path: &Path) -> Result<Records, String> {
    let shown = path.display();
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((BTreeMap::new(), 0, 0)),
        Err(e) => return Err(format!("reading {shown}: {e}")),
    };
    let parse = |body: &[u8]| -> Option<(u64, String, Vec<u8>)> {
        let rev = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
        let key_len = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?) as usize;
        let key = std::str::from_utf8(body.get(12..12usize.checked_add(key_len)?)?).ok()?;
        Some((rev, key.to_string(), body[12 + key_len..].to_vec()))
    };
    let (frames, bad) = frames(&bytes);
    let mut records = BTreeMap::new();
    let mut rev = 0;
    let mut end = 0;
    for (at, body) in frames {
        let Some((r, key, value)) = parse(body) else {
            return Err(damaged(path, at, "a record that does not parse"));
        };
        rev = rev.max(r);
        records.insert(key, (value, r));
        end = at + FRAME_HEADER + body.len();
    }
    if let Some(at) = bad {
        if good_frame_after(&bytes, at, |body| parse(body).is_some_and(|(r, _, _)| r > rev)).is_some() {
            return Err(damaged(path, at, "a frame that does not check, with records after it"));
        }
        tracing::warn!(file = %shown, at, cut_bytes = bytes.len() - at, "progress records end in a torn tail: cut off");
        let file = OpenOptions::new().write(true).open(path).map_err(|e| format!("opening {shown}: {e}"))?;
        file.set_len(at as u64).and_then(|_| file.sync_all()).map_err(|e| format!("cutting {shown}: {e}"))?;
    }
    Ok((records, rev, end as u64))
}

/// The stored snapshot files by position, oldest first.
fn snapshot_files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.ends_with(".tmp") {
            // A write a crash interrupted: never renamed into place, never announced.
            let _ = fs::remove_file(&path);
            continue;
        }
        if let Some(position) = name.strip_suffix(".snap").and_then(|n| n.parse::<u64>().ok()) {
            out.push((position, path));
        }
    }
    out.sort();
    Ok(out)
}

/// A snapshot file's position and bytes, if its frame is whole and checks.
fn read_snapshot(path: &Path) -> io::Result<Option<(u64, Vec<u8>)>> {
    let bytes = fs::read(path)?;
    let parsed = (|| {
        let len = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
        let crc = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
        let body = bytes.get(12..12usize.checked_add(len)?)?;
        if CRC.checksum(body) != crc || bytes.len() != 12 + len {
            return None;
        }
        let position = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
        Some((position, body[8..].to_vec()))
    })();
    Ok(parsed)
}

/// Checks every stored snapshot; the positions, oldest first. A damaged one is refused: the log below it may
/// be purged, so starting from an older one could silently lose what came between.
fn check_snapshots(dir: &Path) -> Result<Vec<u64>, String> {
    let files = snapshot_files(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for (position, path) in files {
        match read_snapshot(&path) {
            Ok(Some((p, _))) if p == position => out.push(position),
            Ok(_) => return Err(damaged(&path, 0, "a snapshot whose checksum or position does not match")),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        }
    }
    Ok(out)
}

/// Writes a snapshot's bytes as they come into a temporary file, then its header (length and checksum, known
/// only at the end) at the file's start, and renames it into place once it is whole and on disk.
fn write_snapshot(dir: &Path, position: u64, mut bytes: SnapshotBytes) -> io::Result<()> {
    let name = format!("{position:020}.snap");
    let tmp = dir.join(format!("{name}.tmp"));
    let mut digest = CRC.digest();
    digest.update(&position.to_le_bytes());
    let mut file = File::create(&tmp)?;
    file.write_all(&[0; 12])?;
    file.write_all(&position.to_le_bytes())?;
    let mut len = 0u64;
    let body = (|| {
        while let Some(chunk) = bytes.blocking_next().map_err(io::Error::other)? {
            digest.update(&chunk);
            file.write_all(&chunk)?;
            len += chunk.len() as u64;
        }
        Ok::<_, io::Error>(())
    })();
    if let Err(e) = body {
        drop(file);
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&(len + 8).to_le_bytes())?;
    file.write_all(&digest.finalize().to_le_bytes())?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, dir.join(&name))?;
    sync_dir(dir)?;
    let files = snapshot_files(dir)?;
    for (_, old) in files.iter().rev().skip(SNAPSHOTS_KEPT) {
        fs::remove_file(old)?;
    }
    Ok(())
}

fn read_latest_snapshot(dir: &Path) -> Result<Option<(u64, Vec<u8>)>, String> {
    let files = snapshot_files(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    let Some((position, path)) = files.last() else { return Ok(None) };
    match read_snapshot(path) {
        Ok(Some((p, bytes))) if p == *position => Ok(Some((p, bytes))),
        Ok(_) => Err(format!("{} is damaged (its checksum or position does not match)", path.display())),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A segment file: the positions it holds and the bodies of its epoch records (kept when it is deleted).
struct Segment {
    last: u64,
    path: PathBuf,
    bytes: u64,
    epochs: Vec<Vec<u8>>,
}

/// The writer thread's state: the segments, the records file, and the batch being written.
struct Writer {
    log_dir: PathBuf,
    /// Segments no longer appended to, oldest first.
    closed: Vec<Segment>,
    /// The segment being appended to: none at start and after a roll, until the next entry.
    open: Option<(Segment, File)>,
    /// Bodies of the epoch records in `log/epochs`, by position (a crash between its rewrite and the deletion
    /// of a segment leaves a record in both; it is kept once).
    kept_epochs: BTreeMap<u64, Vec<u8>>,
    records_path: PathBuf,
    records: File,
    records_bytes: u64,
    /// The live records (key -> revision, value), to rewrite the file from.
    live: BTreeMap<String, (u64, Vec<u8>)>,
    live_bytes: u64,
    seg_buf: Vec<u8>,
    rec_buf: Vec<u8>,
    /// A segment was made: its directory entry must be durable before its entries are.
    dir_dirty: bool,
    mark: Mark,
}

impl Writer {
    /// Writes batches until closed; `lock` is held until then.
    fn run(
        mut self,
        lock: File,
        jobs: mpsc::Receiver<Job>,
        marks: watch::Sender<Mark>,
        synced: impl Fn(u64),
    ) -> io::Result<()> {
        while let Ok(first) = jobs.recv() {
            // Group commit: everything that arrived while the last batch was being fsync'd goes in this one.
            let mut after = Vec::new();
            let before = self.mark;
            for job in std::iter::once(first).chain(jobs.try_iter()) {
                match job {
                    Job::Entry { seq, bytes, epoch } => self.entry(seq, &bytes, epoch)?,
                    Job::Record { rev, key, value } => self.record(rev, key, value),
                    Job::Roll => self.roll()?,
                    job @ (Job::Purge { .. } | Job::Close { .. }) => after.push(job),
                }
            }
            self.sync()?;
            if self.mark.seq > before.seq {
                synced(self.mark.seq);
            }
            marks.send_replace(self.mark);
            for job in after {
                match job {
                    Job::Purge { below, done } => {
                        let _ = done.send(self.purge(below)?);
                    }
                    Job::Close { done } => {
                        drop(lock);
                        let _ = done.send(());
                        return Ok(());
                    }
                    _ => unreachable!("only purges and closes wait for the batch"),
                }
            }
            self.maybe_rewrite_records()?;
        }
        Ok(())
    }

    fn entry(&mut self, seq: u64, bytes: &[u8], epoch: bool) -> io::Result<()> {
        if self.open.as_ref().is_some_and(|(s, _)| s.bytes >= SEGMENT_BYTES) {
            self.roll()?;
        }
        if self.open.is_none() {
            let path = self.log_dir.join(format!("{seq:020}.seg"));
            let file = OpenOptions::new().create_new(true).append(true).open(&path)?;
            self.open = Some((Segment { last: seq, path, bytes: 0, epochs: Vec::new() }, file));
            self.dir_dirty = true;
        }
        let (seg, _) = self.open.as_mut().expect("a segment is open");
        let start = self.seg_buf.len();
        frame(&mut self.seg_buf, &[&seq.to_le_bytes(), bytes]);
        seg.bytes += (self.seg_buf.len() - start) as u64;
        seg.last = seq;
        if epoch {
            seg.epochs.push(self.seg_buf[start + FRAME_HEADER..].to_vec());
        }
        self.mark.seq = seq;
        Ok(())
    }

    fn record(&mut self, rev: u64, key: String, value: Vec<u8>) {
        let len = record_frame_len(&key, &value);
        frame(&mut self.rec_buf, &[&rev.to_le_bytes(), &(key.len() as u32).to_le_bytes(), key.as_bytes(), &value]);
        self.records_bytes += len;
        self.live_bytes += len;
        if let Some((_, old)) = self.live.insert(key.clone(), (rev, value)) {
            self.live_bytes -= record_frame_len(&key, &old);
        }
        self.mark.rev = self.mark.rev.max(rev);
    }

    /// Closes the open segment, fsync'd whole, so that a crash can only ever cut the newest one short.
    fn roll(&mut self) -> io::Result<()> {
        if let Some((seg, mut file)) = self.open.take() {
            file.write_all(&self.seg_buf)?;
            self.seg_buf.clear();
            file.sync_data()?;
            self.closed.push(seg);
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        if let Some((_, file)) = self.open.as_mut().filter(|_| !self.seg_buf.is_empty()) {
            file.write_all(&self.seg_buf)?;
            self.seg_buf.clear();
            file.sync_data()?;
        }
        if !self.rec_buf.is_empty() {
            self.records.write_all(&self.rec_buf)?;
            self.rec_buf.clear();
            self.records.sync_data()?;
        }
        if std::mem::take(&mut self.dir_dirty) {
            sync_dir(&self.log_dir)?;
        }
        Ok(())
    }

    /// Deletes the closed segments whose entries are all below `below`, after their epoch records are in
    /// `log/epochs`. The newest segment always stays: it holds the log's last position, after which the next
    /// start continues.
    fn purge(&mut self, below: u64) -> io::Result<Freed> {
        let mut n = self.closed.iter().take_while(|s| s.last < below).count();
        if self.open.is_none() {
            n = n.min(self.closed.len().saturating_sub(1));
        }
        if n == 0 {
            return Ok(Freed::default());
        }
        let gone: Vec<Segment> = self.closed.drain(..n).collect();
        let epochs: Vec<(u64, Vec<u8>)> = gone
            .iter()
            .flat_map(|s| s.epochs.iter())
            .filter_map(|body| entry_body(body).map(|(seq, _)| (seq, body.clone())))
            .collect();
        if !epochs.is_empty() {
            self.kept_epochs.extend(epochs);
            let mut buf = Vec::new();
            for body in self.kept_epochs.values() {
                frame(&mut buf, &[body]);
            }
            replace_file(&self.log_dir.join("epochs"), &buf)?;
        }
        let mut freed = Freed::default();
        for seg in gone {
            if let Err(e) = fs::remove_file(&seg.path) {
                // Its entries are all below the purge point and its epoch records are kept: only space is lost.
                tracing::warn!(file = %seg.path.display(), error = %e, "removing a compacted log segment");
                continue;
            }
            freed.segments += 1;
            freed.bytes += seg.bytes;
        }
        sync_dir(&self.log_dir)?;
        Ok(freed)
    }

    fn maybe_rewrite_records(&mut self) -> io::Result<()> {
        if self.records_bytes < RECORDS_REWRITE_BYTES || self.records_bytes < 4 * self.live_bytes {
            return Ok(());
        }
        let mut by_rev: Vec<(&u64, &String, &Vec<u8>)> = self.live.iter().map(|(k, (r, v))| (r, k, v)).collect();
        by_rev.sort();
        let mut buf = Vec::with_capacity(self.live_bytes as usize);
        for (rev, key, value) in by_rev {
            frame(&mut buf, &[&rev.to_le_bytes(), &(key.len() as u32).to_le_bytes(), key.as_bytes(), value]);
        }
        replace_file(&self.records_path, &buf)?;
        self.records = OpenOptions::new().append(true).open(&self.records_path)?;
        self.records_bytes = buf.len() as u64;
        Ok(())
    }
}

/// Replaces `path` with `bytes` atomically: a temporary file, fsync'd, renamed over it, the directory fsync'd.
fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jaque_core::{EpochRecord, Event, EventBody, MemberId, MemberRef, ObjectId, Time};
    use std::sync::{Arc, Mutex};

    fn epoch(n: u64) -> LogEntry {
        LogEntry::Epoch(EpochRecord {
            epoch: n,
            members: vec![MemberRef { id: MemberId::new("e1").unwrap(), incarnation: n }],
            members_rev: n,
            idempotency_window_ms: None,
            format: 1,
        })
    }

    fn event(object: &str) -> LogEntry {
        LogEntry::Event(Event {
            object: ObjectId::new(object).unwrap(),
            epoch: 1,
            writer: MemberRef { id: MemberId::new("e1").unwrap(), incarnation: 1 },
            at: Time::from_millis(1),
            command_id: None,
            body: EventBody::Delete,
        })
    }

    /// A started data directory and the positions its writer reported durable.
    fn start(dir: &Path) -> (Loaded, DiskLog, Arc<Mutex<Vec<u64>>>) {
        let synced = Arc::new(Mutex::new(Vec::new()));
        let s = synced.clone();
        let (loaded, disk) = DataDir::open(dir).unwrap().start(move |seq| s.lock().unwrap().push(seq));
        (loaded, disk, synced)
    }

    fn segments(dir: &Path) -> Vec<u64> {
        segment_files(&dir.join("log")).unwrap().into_iter().map(|(f, _)| f).collect()
    }

    #[test]
    fn an_entry_of_a_newer_cluster_format_is_held_as_what_it_needs_not_as_garbage() {
        assert_eq!(decode_entry(5, br#"{"v":99,"entry":"event","type":"flapping"}"#), Err(Some(99)));
        assert_eq!(decode_entry(6, b"not json"), Err(None));
        let LogEntry::Event(e) = event("a") else { unreachable!() };
        let unack = LogEntry::Event(Event { body: EventBody::Unack, ..e });
        assert_eq!(decode_entry(7, &wire::encode_log_entry(&unack)), Ok(unack));
    }

    #[tokio::test]
    async fn entries_records_and_snapshots_survive_a_restart_and_are_synced_before_they_count() {
        let tmp = tempfile::tempdir().unwrap();
        let (loaded, disk, synced) = start(tmp.path());
        assert_eq!((loaded.log.len(), loaded.next_seq, loaded.rev), (0, 1, 0));
        disk.entry(1, &epoch(1)).wait().await.unwrap();
        disk.entry(2, &event("a"));
        disk.entry(3, &event("b")).wait().await.unwrap();
        disk.record(7, "notify.x.y", b"{}").wait().await.unwrap();
        disk.save_snapshot(3, SnapshotBytes::from_vec(b"state at 3".to_vec())).await.unwrap();
        assert_eq!(synced.lock().unwrap().last(), Some(&3), "the store hears of every position once it is durable");
        disk.close().await;
        drop(disk);

        let (loaded, disk, _) = start(tmp.path());
        assert_eq!(loaded.log.len(), 3);
        assert_eq!(loaded.log[&2], Ok(event("a")));
        assert_eq!((loaded.next_seq, loaded.last_epoch_seq, loaded.rev), (4, Some(1), 7));
        assert_eq!(loaded.records["notify.x.y"], (b"{}".to_vec(), 7));
        assert_eq!(disk.latest_snapshot().await.unwrap(), Some((3, b"state at 3".to_vec())));
        disk.close().await;
    }

    #[tokio::test]
    async fn a_second_open_is_refused_while_the_first_holds_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, disk, _) = start(tmp.path());
        let e = DataDir::open(tmp.path()).err().unwrap();
        assert!(e.contains("in use by another jaque process") && e.contains(&std::process::id().to_string()), "{e}");
        disk.close().await;
        drop(disk);
        let file = tmp.path().join("file");
        fs::write(&file, b"").unwrap();
        assert!(DataDir::open(&file).err().unwrap().contains("is not a directory"));
    }

    #[tokio::test]
    async fn a_torn_tail_is_cut_and_damage_before_good_entries_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, disk, _) = start(tmp.path());
        for seq in 1..=5 {
            disk.entry(seq, &event("a"));
        }
        disk.entry(6, &event("b")).wait().await.unwrap();
        disk.close().await;
        drop(disk);
        let seg = tmp.path().join("log").join(format!("{:020}.seg", 1));
        let whole = fs::read(&seg).unwrap();

        // Torn: the last frame cut short.
        fs::write(&seg, &whole[..whole.len() - 3]).unwrap();
        let (loaded, disk, _) = start(tmp.path());
        assert_eq!(loaded.log.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        assert_eq!(loaded.next_seq, 6);
        disk.close().await;
        drop(disk);

        // Damaged in the middle: a flipped byte in the second entry, good entries after it.
        let mut bad = whole.clone();
        let (_, second) = frame_at(&bad, 0).unwrap();
        bad[second + FRAME_HEADER + 9] ^= 0xff;
        fs::write(&seg, &bad).unwrap();
        let e = DataDir::open(tmp.path()).err().unwrap();
        assert!(e.contains("is damaged at byte") && e.contains("truncate -s"), "{e}");
    }

    #[tokio::test]
    async fn a_purge_deletes_whole_segments_below_it_and_keeps_their_epoch_records() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, disk, _) = start(tmp.path());
        disk.entry(1, &epoch(1));
        disk.entry(2, &event("a")).wait().await.unwrap();
        disk.save_snapshot(2, SnapshotBytes::from_vec(b"s2".to_vec())).await.unwrap();
        disk.entry(3, &event("b"));
        disk.entry(4, &event("c")).wait().await.unwrap();
        disk.save_snapshot(4, SnapshotBytes::from_vec(b"s4".to_vec())).await.unwrap();
        disk.entry(5, &event("d")).wait().await.unwrap();
        assert_eq!(segments(tmp.path()), vec![1, 3, 5]);
        assert_eq!(disk.purge(3).await.unwrap().segments, 1, "the segment of 1..=2 is below 3");
        assert_eq!(disk.purge(5).await.unwrap().segments, 1);
        assert_eq!(segments(tmp.path()), vec![5], "the open segment stays");
        disk.save_snapshot(5, SnapshotBytes::from_vec(b"s5".to_vec())).await.unwrap();
        assert_eq!(disk.purge(6).await.unwrap(), Freed::default(), "the newest segment holds the last position");
        assert_eq!(snapshot_files(&tmp.path().join("snapshots")).unwrap().len(), SNAPSHOTS_KEPT);
        disk.close().await;
        drop(disk);

        let (loaded, disk, _) = start(tmp.path());
        assert_eq!(loaded.log.keys().copied().collect::<Vec<_>>(), vec![1, 5], "events gone, the epoch kept");
        assert_eq!((loaded.last_epoch_seq, loaded.next_seq), (Some(1), 6));
        disk.close().await;
    }

    fn format_of(dir: &Path) -> String {
        fs::read_to_string(dir.join(FORMAT_FILE)).unwrap()
    }

    #[tokio::test]
    async fn a_new_directory_is_marked_with_this_builds_version_and_the_build() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new");
        let (_, disk, _) = start(&dir);
        let marker = format_of(&dir);
        assert_eq!(marker.lines().next(), Some(format!("jaque data-dir {}", DataDir::VERSION).as_str()));
        assert_eq!(marker.lines().nth(1), Some(format!("written by jaque {}", crate::cli::BUILD).as_str()));
        disk.entry(1, &epoch(1)).wait().await.unwrap();
        disk.close().await;
        drop(disk);
        // Reopened, the marker stays as the build that made the directory wrote it.
        fs::write(dir.join(FORMAT_FILE), "jaque data-dir 1\nwritten by jaque 0.1.0 (commit 0000000)\n").unwrap();
        let (loaded, disk, _) = start(&dir);
        assert_eq!(loaded.log.len(), 1);
        assert_eq!(format_of(&dir), "jaque data-dir 1\nwritten by jaque 0.1.0 (commit 0000000)\n");
        disk.close().await;
    }

    #[tokio::test]
    async fn a_directory_without_a_marker_is_a_pre_release_builds_version_1_read_and_then_marked() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, disk, _) = start(tmp.path());
        disk.entry(1, &epoch(1));
        disk.entry(2, &event("a")).wait().await.unwrap();
        disk.record(3, "notify.x.y", b"{}").wait().await.unwrap();
        disk.save_snapshot(2, SnapshotBytes::from_vec(b"s2".to_vec())).await.unwrap();
        disk.close().await;
        drop(disk);
        // What a build before v0.1.0 leaves: version 1's files, no FORMAT (they are the same bytes).
        fs::remove_file(tmp.path().join(FORMAT_FILE)).unwrap();
        let (loaded, disk, _) = start(tmp.path());
        assert_eq!(loaded.log.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(loaded.records["notify.x.y"], (b"{}".to_vec(), 3));
        assert_eq!(disk.latest_snapshot().await.unwrap(), Some((2, b"s2".to_vec())));
        assert!(format_of(tmp.path()).starts_with("jaque data-dir 1\n"), "marked once read");
        disk.close().await;
    }

    #[tokio::test]
    async fn a_directory_of_a_newer_version_or_a_foreign_marker_is_refused_and_left_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, disk, _) = start(tmp.path());
        for seq in 1..=3 {
            disk.entry(seq, &event("a"));
        }
        disk.entry(4, &event("b")).wait().await.unwrap();
        disk.close().await;
        drop(disk);
        // A newer build's directory, whose newest segment this build would take for one with a torn tail.
        let seg = tmp.path().join("log").join(format!("{:020}.seg", 1));
        let mut bytes = fs::read(&seg).unwrap();
        bytes.extend_from_slice(b"version 2 bytes");
        fs::write(&seg, &bytes).unwrap();
        let newer = format!("jaque data-dir {}\nwritten by jaque 9.0.0 (commit abcdef0)\n", DataDir::VERSION + 1);
        fs::write(tmp.path().join(FORMAT_FILE), &newer).unwrap();
        fs::remove_file(tmp.path().join("lock")).unwrap();
        let e = DataDir::open(tmp.path()).err().unwrap();
        let want = format!(
            "was written by a newer jaque (data-dir version {}, jaque 9.0.0 (commit abcdef0)); this build (jaque {}) \
             reads up to {}",
            DataDir::VERSION + 1,
            crate::cli::BUILD,
            DataDir::VERSION
        );
        assert!(e.contains(&want), "{e}");
        assert_eq!(fs::read(&seg).unwrap(), bytes, "no tail cut");
        assert_eq!(format_of(tmp.path()), newer);
        assert!(!tmp.path().join("lock").exists(), "not even the lock taken");

        fs::write(tmp.path().join(FORMAT_FILE), "jaque data-dir 3\n").unwrap();
        let e = DataDir::open(tmp.path()).err().unwrap();
        assert!(e.contains("a newer jaque (data-dir version 3); this build"), "without a build named: {e}");
        for foreign in ["", "1\n", "jaque data-dir one\n", "jaque sink 1\n"] {
            fs::write(tmp.path().join(FORMAT_FILE), foreign).unwrap();
            let e = DataDir::open(tmp.path()).err().unwrap();
            assert!(e.contains("does not say `jaque data-dir <version>`"), "{foreign:?}: {e}");
        }
    }

    #[tokio::test]
    async fn records_are_rewritten_when_mostly_stale_and_read_back_the_same() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, disk, _) = start(tmp.path());
        let value = vec![b'x'; 1000];
        let mut last = None;
        for rev in 1..=3000u64 {
            last = Some(disk.record(rev, &format!("k{}", rev % 3), &value));
        }
        last.unwrap().wait().await.unwrap();
        disk.close().await;
        drop(disk);
        let len = fs::metadata(tmp.path().join("records")).unwrap().len();
        assert!(len < RECORDS_REWRITE_BYTES, "rewritten: {len} bytes");
        let (loaded, disk, _) = start(tmp.path());
        assert_eq!(loaded.records.len(), 3);
        assert_eq!(loaded.records["k0"].1, 3000);
        assert_eq!(loaded.rev, 3000);
        disk.close().await;
    }
}

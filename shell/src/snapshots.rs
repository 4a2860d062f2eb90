//! Snapshots in the shell: every role that reads the log starts from the latest stored snapshot and follows the
//! log from the position after it; a reader that meets a hole in the log (events purged below a snapshot) loads
//! the latest one again and jumps to it. The engine that the core names writes them, encoded off the loop, and
//! purges what the core allows. What is due, who writes and what may go are the core's (`jaque_core::compact`).

use crate::coord::Coordination;
use crate::metrics::Exposition;
use jaque_core::log::{LogReader, ReaderSnapshot};
use jaque_core::wire;
use std::io::{self, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::sync::mpsc;

static WRITTEN: AtomicU64 = AtomicU64::new(0);
static WRITE_FAILURES: AtomicU64 = AtomicU64::new(0);
static LAST_POSITION: AtomicU64 = AtomicU64::new(0);
static LAST_BYTES: AtomicU64 = AtomicU64::new(0);
static LOADED: AtomicU64 = AtomicU64::new(0);
static LOAD_FAILURES: AtomicU64 = AtomicU64::new(0);
static PURGES: AtomicU64 = AtomicU64::new(0);
static PURGED_BELOW: AtomicU64 = AtomicU64::new(0);

/// The latest stored snapshot as a reader, if there is one that decodes. A snapshot that cannot be read is
/// logged and counted, and the caller starts from the log's first position instead (where a purged log shows
/// a hole, which asks again).
pub async fn latest_reader(coord: &Coordination) -> Option<LogReader> {
    let started = Instant::now();
    let (position, mut bytes) = match coord.latest_snapshot().await {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        Err(e) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "reading the latest snapshot; following the log from its start");
            return None;
        }
    };
    // Decoded as the bytes come from the store: they are never held whole.
    let decoded = tokio::task::spawn_blocking(move || {
        let reader = wire::read_snapshot(&mut bytes);
        (reader, bytes.received)
    })
    .await;
    let (decoded, len) = match decoded {
        Ok((r, len)) => (Ok(r), len),
        Err(e) => (Err(e), 0),
    };
    match decoded {
        Ok(Ok(reader)) if reader.position() == position => {
            LOADED.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                position,
                bytes = len,
                objects = reader.objects().len(),
                took_ms = started.elapsed().as_millis() as u64,
                "starting from a snapshot"
            );
            Some(reader)
        }
        Ok(Ok(reader)) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(position, inside = reader.position(), "a snapshot stored under another position; skipped");
            None
        }
        Ok(Err(e)) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            crate::metrics::wire_error("snapshot");
            tracing::warn!(position, error = %e, "a snapshot that does not decode; skipped");
            None
        }
        Err(e) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(position, error = %e, "decoding a snapshot");
            None
        }
    }
}

/// Encodes and stores a snapshot off the loop; `done` gets the store's answer. The bytes go to the store as
/// they are made, a chunk at a time, and are never held whole (a snapshot of a million objects is ~240 MB).
pub fn spawn_write(
    coord: Coordination,
    snapshot: Box<ReaderSnapshot>,
    done: impl FnOnce(u64, Result<(), String>) + Send + 'static,
) {
    tokio::spawn(async move {
        let position = snapshot.position;
        let started = Instant::now();
        let (bytes, mut writer) = SnapshotBytes::channel();
        let encoder = tokio::task::spawn_blocking(move || {
            wire::write_snapshot(&snapshot, &mut writer)?;
            writer.finish()
        });
        let stored = coord.save_snapshot(position, bytes).await;
        // The encoder ends by itself once the store stops reading.
        let encoded = match encoder.await {
            Ok(Ok(len)) => Ok(len),
            Ok(Err(e)) => Err(format!("encoding the snapshot: {e}")),
            Err(e) => Err(format!("encoding the snapshot: {e}")),
        };
        let result = match (stored, encoded) {
            (Ok(()), Ok(len)) => {
                WRITTEN.fetch_add(1, Ordering::Relaxed);
                LAST_POSITION.fetch_max(position, Ordering::Relaxed);
                LAST_BYTES.store(len, Ordering::Relaxed);
                tracing::info!(
                    position,
                    bytes = len,
                    took_ms = started.elapsed().as_millis() as u64,
                    "snapshot written"
                );
                Ok(())
            }
            (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        };
        if let Err(e) = &result {
            WRITE_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(position, error = %e, "writing a snapshot; the next one is tried when due");
        }
        done(position, result);
    });
}

/// How many bytes of an encoded snapshot go to the store at once.
const CHUNK: usize = 256 * 1024;

/// An encoded snapshot as its encoder makes it: chunks in order, then an empty chunk that says it is whole. A
/// store reads it as it comes ([`SnapshotBytes::blocking_next`], or as an [`AsyncRead`] or a blocking
/// [`io::Read`]); if the encoder stops before the end, reading says so instead of ending, so that a
/// truncated snapshot is never stored.
pub struct SnapshotBytes {
    rx: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    whole: bool,
    /// Bytes received so far.
    pub received: u64,
}

/// The encoder's end of [`SnapshotBytes`].
pub struct SnapshotWriter {
    tx: mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
    len: u64,
}

impl SnapshotBytes {
    /// A snapshot's bytes and the writer that makes them; two chunks wait between them at most.
    pub fn channel() -> (SnapshotBytes, SnapshotWriter) {
        let (tx, rx) = mpsc::channel(2);
        let bytes = SnapshotBytes { rx, chunk: Vec::new(), at: 0, whole: false, received: 0 };
        (bytes, SnapshotWriter { tx, buf: Vec::with_capacity(CHUNK), len: 0 })
    }

    /// Bytes already whole, as one chunk (a store that keeps them so).
    pub fn from_vec(bytes: Vec<u8>) -> SnapshotBytes {
        let (out, w) = SnapshotBytes::channel();
        if !bytes.is_empty() {
            w.tx.try_send(bytes).expect("room for one chunk");
        }
        w.tx.try_send(Vec::new()).expect("room for the end");
        out
    }

    fn accept(&mut self, got: Option<Vec<u8>>) -> Result<Option<Vec<u8>>, String> {
        match got {
            Some(c) if c.is_empty() => {
                self.whole = true;
                Ok(None)
            }
            Some(c) => {
                self.received += c.len() as u64;
                Ok(Some(c))
            }
            None if self.whole => Ok(None),
            None => Err("the snapshot's encoding stopped before its end".into()),
        }
    }

    /// The next chunk, `None` once the snapshot is whole, read from a thread outside the runtime (a blocking
    /// task).
    pub fn blocking_next(&mut self) -> Result<Option<Vec<u8>>, String> {
        if self.whole {
            return Ok(None);
        }
        let got = self.rx.blocking_recv();
        self.accept(got)
    }

    /// Every chunk in one buffer (a store that keeps snapshots in memory).
    pub async fn collect(mut self) -> Result<Vec<u8>, String> {
        let mut all = Vec::new();
        self.read_to_end(&mut all).await.map_err(|e| e.to_string())?;
        Ok(all)
    }
}

impl AsyncRead for SnapshotBytes {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        while self.at == self.chunk.len() {
            if self.whole {
                return Poll::Ready(Ok(()));
            }
            let got = ready!(self.rx.poll_recv(cx));
            match self.accept(got) {
                Ok(Some(c)) => (self.chunk, self.at) = (c, 0),
                Ok(None) => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(io::Error::other(e))),
            }
        }
        let n = out.remaining().min(self.chunk.len() - self.at);
        out.put_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

/// Read from a thread outside the runtime (a blocking task), as `blocking_next` reads.
impl io::Read for SnapshotBytes {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.blocking_next().map_err(io::Error::other)? {
                Some(c) => (self.chunk, self.at) = (c, 0),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl SnapshotWriter {
    /// Sends what `from` reads, a chunk at a time, then the end; an error reading it ends the bytes without
    /// their end, so that their reader fails instead of taking them for whole. The length in bytes.
    pub async fn feed(self, from: impl AsyncRead) -> io::Result<u64> {
        tokio::pin!(from);
        let mut len = 0u64;
        loop {
            let mut chunk = Vec::with_capacity(CHUNK);
            let mut end = false;
            while chunk.len() < CHUNK {
                if from.read_buf(&mut chunk).await? == 0 {
                    end = true;
                    break;
                }
            }
            len += chunk.len() as u64;
            let closed = || io::Error::new(io::ErrorKind::BrokenPipe, "the snapshot's reader stopped reading");
            if !chunk.is_empty() {
                self.tx.send(chunk).await.map_err(|_| closed())?;
            }
            if end {
                self.tx.send(Vec::new()).await.map_err(|_| closed())?;
                return Ok(len);
            }
        }
    }

    fn send(&mut self, chunk: Vec<u8>) -> io::Result<()> {
        self.tx.blocking_send(chunk).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the store stopped reading"))
    }

    /// Sends what is left and the end; the snapshot's length in bytes.
    pub fn finish(mut self) -> io::Result<u64> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            self.send(rest)?;
        }
        self.send(Vec::new())?;
        Ok(self.len)
    }
}

impl Write for SnapshotWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        self.len += b.len() as u64;
        if self.buf.len() >= CHUNK {
            let full = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
            self.send(full)?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Purges the log's events below `below` (a snapshot past them is durable).
pub fn spawn_purge(coord: Coordination, below: u64) {
    tokio::spawn(async move {
        match coord.purge_events_below(below).await {
            Ok(()) => {
                PURGES.fetch_add(1, Ordering::Relaxed);
                PURGED_BELOW.fetch_max(below, Ordering::Relaxed);
                tracing::info!(below, "log compacted: events below this position purged");
            }
            // The next snapshot's purge covers this one's range too.
            Err(e) => tracing::warn!(below, error = %e, "purging the log"),
        }
    });
}

/// A role's loads of the latest snapshot after its core met a hole in the log: one at a time (the core asks
/// again at every heartbeat while the hole is there).
#[derive(Default)]
pub struct Restores {
    loading: bool,
}

impl Restores {
    /// Starts loading the latest snapshot for a hole ending at `covering`, unless a load is running; `done` gets
    /// it when it reaches that far, `None` otherwise. Call `answered` when the answer is in.
    pub fn ask(&mut self, coord: &Coordination, covering: u64, done: impl FnOnce(Option<LogReader>) + Send + 'static) {
        if !std::mem::replace(&mut self.loading, true) {
            spawn_restore(coord.clone(), covering, done);
        }
    }

    pub fn answered(&mut self) {
        self.loading = false;
    }
}

/// Tells loudly that a sink or notifier found accepted events gone from the log before it handled them: it
/// lagged past `-log-retention` (or events were purged by hand). `before` and `after` are the core's count.
pub fn warn_history_lost(role: &str, before: u64, after: u64) {
    if after > before {
        tracing::error!(
            role,
            objects = after - before,
            "accepted events of these objects were purged from the log before this {role} handled them (it lagged \
             behind by more than -log-retention): they are missing from what it wrote; their current state is not"
        );
    }
}

fn spawn_restore(coord: Coordination, covering: u64, done: impl FnOnce(Option<LogReader>) + Send + 'static) {
    tokio::spawn(async move {
        let reader = latest_reader(&coord).await;
        match &reader {
            Some(r) if r.position() >= covering => {
                tracing::info!(position = r.position(), covering, "jumping past a hole in the log to a snapshot");
            }
            Some(r) => tracing::warn!(
                position = r.position(),
                covering,
                "the log has a hole below position {covering} and the latest snapshot does not reach it; waiting \
                 for a newer snapshot"
            ),
            None => tracing::warn!(
                covering,
                "the log has a hole below position {covering} and there is no snapshot to jump to; waiting for one"
            ),
        }
        done(reader.filter(|r| r.position() >= covering));
    });
}

/// The snapshot metrics of this process.
pub fn expose(m: &mut Exposition) {
    let rows: [(&str, &str, &str, &AtomicU64); 8] = [
        ("jaque_snapshots_written_total", "counter", "Snapshots this process wrote.", &WRITTEN),
        ("jaque_snapshot_write_failures_total", "counter", "Snapshot writes that failed.", &WRITE_FAILURES),
        ("jaque_snapshot_position", "gauge", "Log position of the last snapshot this process wrote.", &LAST_POSITION),
        ("jaque_snapshot_bytes", "gauge", "Size of the last snapshot this process wrote.", &LAST_BYTES),
        ("jaque_snapshot_loads_total", "counter", "Snapshots this process started from or jumped to.", &LOADED),
        ("jaque_snapshot_load_failures_total", "counter", "Snapshots that could not be read.", &LOAD_FAILURES),
        ("jaque_log_purges_total", "counter", "Purges of the log this process made.", &PURGES),
        ("jaque_log_purged_below", "gauge", "Events below this position were purged by this process.", &PURGED_BELOW),
    ];
    for (name, kind, help, v) in rows {
        m.one(name, kind, help, v.load(Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    /// Bytes written by a blocking encoder, over several chunks, read back whole as an `AsyncRead`.
    #[test]
    fn a_snapshot_read_as_it_is_written_is_the_bytes_written() {
        rt().block_on(async {
            let want: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i % 251) as u8).collect();
            let (mut bytes, mut w) = SnapshotBytes::channel();
            let written = want.clone();
            let encoder = tokio::task::spawn_blocking(move || {
                for piece in written.chunks(1000) {
                    w.write_all(piece)?;
                }
                w.finish()
            });
            let mut got = Vec::new();
            bytes.read_to_end(&mut got).await.unwrap();
            assert_eq!(encoder.await.unwrap().unwrap(), want.len() as u64);
            assert_eq!(got, want);
        });
    }

    /// An encoder that stops before its end leaves bytes that read as an error, never as a shorter snapshot.
    #[test]
    fn a_snapshot_whose_encoder_stopped_early_reads_as_an_error() {
        rt().block_on(async {
            let (mut bytes, mut w) = SnapshotBytes::channel();
            tokio::task::spawn_blocking(move || {
                w.write_all(&vec![b'x'; CHUNK + 1]).unwrap();
                drop(w);
            })
            .await
            .unwrap();
            let mut got = Vec::new();
            assert!(bytes.read_to_end(&mut got).await.is_err(), "read {} bytes as a whole snapshot", got.len());
            let (bytes, w) = SnapshotBytes::channel();
            drop(w);
            assert!(bytes.collect().await.is_err(), "an encoder that wrote nothing made a whole snapshot");
        });
    }

    /// A store that stops reading stops the encoder with an error instead of leaving it blocked.
    #[test]
    fn an_encoder_whose_store_stopped_reading_ends_with_an_error() {
        rt().block_on(async {
            let (bytes, mut w) = SnapshotBytes::channel();
            drop(bytes);
            let r = tokio::task::spawn_blocking(move || {
                w.write_all(&vec![b'x'; 4 * CHUNK])?;
                w.finish()
            })
            .await
            .unwrap();
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
        });
    }

    /// A store's bytes that fail on the way: whatever came before the failure is never read as a whole snapshot.
    struct Failing(Vec<u8>);

    impl AsyncRead for Failing {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            if self.0.is_empty() {
                return Poll::Ready(Err(io::Error::other("digest mismatch")));
            }
            let n = out.remaining().min(self.0.len());
            out.put_slice(&self.0[..n]);
            self.0.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    fn read_all(mut bytes: SnapshotBytes) -> io::Result<Vec<u8>> {
        let mut got = Vec::new();
        io::Read::read_to_end(&mut bytes, &mut got).map(|_| got)
    }

    #[test]
    fn bytes_fed_from_a_store_read_whole_and_a_failing_store_reads_as_an_error() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let want: Vec<u8> = (0..2 * CHUNK + 5).map(|i| (i % 253) as u8).collect();
            let (bytes, w) = SnapshotBytes::channel();
            let fed = tokio::spawn(w.feed(std::io::Cursor::new(want.clone())));
            let got = tokio::task::spawn_blocking(move || read_all(bytes)).await.unwrap().unwrap();
            assert_eq!(fed.await.unwrap().unwrap(), want.len() as u64);
            assert_eq!(got, want);

            let (bytes, w) = SnapshotBytes::channel();
            let fed = tokio::spawn(w.feed(Failing(want.clone())));
            let got = tokio::task::spawn_blocking(move || read_all(bytes)).await.unwrap();
            assert!(got.is_err(), "a snapshot whose store failed was read whole");
            assert!(fed.await.unwrap().is_err());
        });
    }
}

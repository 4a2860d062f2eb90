//! A snapshot as the store takes and gives it: its bytes, streamed in chunks as the encoder makes them or the
//! store reads them (a snapshot of a million objects is ~240 MB, never held whole), and how many a store keeps.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::sync::mpsc;

/// How many snapshots a store keeps: the newest, and one before it for a reader that is loading it.
pub const SNAPSHOTS_KEPT: usize = 2;

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

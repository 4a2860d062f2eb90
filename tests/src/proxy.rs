//! A loopback TCP proxy the test controls: put it between one process and nats-server, then `cut` the link
//! (every connection is closed and new ones are refused at once) and `heal` it. Plain threads, no runtime.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

pub struct Proxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    /// Connections accepted so far (a reconnect shows up here).
    accepted: Arc<Mutex<u64>>,
}

impl Proxy {
    /// Listens on a free 127.0.0.1 port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port for the proxy");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let accepted: Arc<Mutex<u64>> = Arc::default();
        let (c, s, cs, acc) = (cut.clone(), stop.clone(), conns.clone(), accepted.clone());
        thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        if c.load(Ordering::SeqCst) {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        }
                        let Ok(server) = TcpStream::connect(upstream) else {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        };
                        client.set_nonblocking(false).unwrap();
                        *acc.lock().unwrap() += 1;
                        let mut list = cs.lock().unwrap();
                        list.push(client.try_clone().unwrap());
                        list.push(server.try_clone().unwrap());
                        pump(client.try_clone().unwrap(), server.try_clone().unwrap());
                        pump(server, client);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(5)),
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy { addr, cut, stop, conns, accepted }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `nats://` URL of the proxy.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Cuts the link: closes every connection through the proxy and refuses new ones until `heal`.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    pub fn accepted(&self) -> u64 {
        *self.accepted.lock().unwrap()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cut();
    }
}

/// Copies bytes one way until either side closes, then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}

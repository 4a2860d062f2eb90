//! An HTTP proxy for fuzzing a jaque that runs checks: it forwards every request to the jaque behind it and
//! points the probe of every definition it carries at 127.0.0.1, so no generated URL or address makes the
//! worker reach beyond this machine. A definition the server would refuse is passed as it is (it stays
//! refused); one it would take gets a loopback target of the same kind (it stays taken). Plain threads.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

pub struct LoopbackProbes {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

/// Where rewritten probes point: the discard port, closed on a test machine, on loopback in any case.
pub const HTTP_TARGET: &str = "http://127.0.0.1:9/";
pub const TCP_TARGET: &str = "127.0.0.1:9";

impl LoopbackProbes {
    pub fn start(upstream: SocketAddr) -> LoopbackProbes {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port for the proxy");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        thread::spawn(move || serve(client, upstream));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        LoopbackProbes { addr, stop }
    }
}

impl Drop for LoopbackProbes {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One request per connection: the answer goes back with `Connection: close` (clients reconnect). The head is
/// passed byte for byte (a fuzzer sends header values that are not UTF-8), but for its length and connection.
fn serve(client: TcpStream, upstream: SocketAddr) {
    let _ = client.set_nonblocking(false);
    let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(&client);
    let mut head: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == b"\r\n" || line == b"\n" => break,
            Ok(_) => head.push(line),
        }
    }
    let name_is = |line: &[u8], name: &str| {
        line.len() > name.len() && line[name.len()] == b':' && line[..name.len()].eq_ignore_ascii_case(name.as_bytes())
    };
    let len: usize = head
        .iter()
        .find(|l| name_is(l, "content-length"))
        .and_then(|l| std::str::from_utf8(&l[15..]).ok()?.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    if head.first().is_some_and(|l| l.starts_with(b"PUT ")) {
        if let Some(rewritten) = loopback_definition(&body) {
            body = rewritten;
        }
    }
    head.retain(|l| !["content-length", "connection", "keep-alive"].iter().any(|h| name_is(l, h)));
    let mut req: Vec<u8> = head.concat();
    req.extend_from_slice(format!("Content-Length: {}\r\nConnection: close\r\n\r\n", body.len()).as_bytes());
    req.extend_from_slice(&body);
    let Ok(mut up) = TcpStream::connect(upstream) else { return };
    let _ = up.set_read_timeout(Some(Duration::from_secs(30)));
    if up.write_all(&req).is_err() {
        return;
    }
    let mut answer = Vec::new();
    let _ = up.read_to_end(&mut answer);
    let mut client = client;
    let _ = client.write_all(&answer);
    let _ = client.shutdown(Shutdown::Both);
}

/// The body with its probe pointed at loopback, when it is a definition whose probe the server would take;
/// `None` to pass the body as it is. The conditions are the server's (`ObjectDef::validate`).
pub fn loopback_definition(body: &[u8]) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let probe = v.get_mut("probe")?.as_object_mut()?;
    match probe.get("type")?.as_str()? {
        "http" => {
            let url = probe.get("url")?.as_str()?;
            let valid = (url.starts_with("http://") || url.starts_with("https://")) && url.len() <= 2048;
            if !valid {
                return None;
            }
            probe.insert("url".into(), HTTP_TARGET.into());
        }
        "tcp" => {
            let addr = probe.get("addr")?.as_str()?;
            let valid = addr.len() <= 512
                && addr
                    .rsplit_once(':')
                    .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0));
            if !valid {
                return None;
            }
            probe.insert("addr".into(), TCP_TARGET.into());
        }
        _ => return None,
    }
    serde_json::to_vec(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn probes_the_server_would_take_point_at_loopback_and_the_rest_pass_unchanged() {
        let rewrite = |v: serde_json::Value| {
            loopback_definition(v.to_string().as_bytes())
                .map(|b| serde_json::from_slice::<serde_json::Value>(&b).unwrap())
        };
        let out =
            rewrite(json!({"probe": {"type": "http", "url": "https://example.com/x"}, "interval": "1s"})).unwrap();
        assert_eq!(out, json!({"probe": {"type": "http", "url": HTTP_TARGET}, "interval": "1s"}));
        let out = rewrite(json!({"probe": {"type": "tcp", "addr": "db.example:5432"}})).unwrap();
        assert_eq!(out["probe"]["addr"], TCP_TARGET);
        for refused in [
            json!({"probe": {"type": "http", "url": "ftp://x"}}),
            json!({"probe": {"type": "tcp", "addr": "x:0"}}),
            json!({"probe": {"type": "tcp", "addr": ":80"}}),
            json!({"probe": {"type": "exec", "plugin": "p"}}),
            json!({"probe": "http"}),
        ] {
            assert_eq!(rewrite(refused.clone()), None, "{refused}");
        }
    }
}

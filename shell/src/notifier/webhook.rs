//! Standard Webhooks (v1) over HTTP: the signing key from `-notify-secret`, the signature, one POST per
//! delivery the core asks for, and the answer classified into the core's `SendResult`. Redirects are not
//! followed (a 3xx is a failure, as the spec says: update the URL instead).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use jaque_core::notifier::{Delivery, SendResult};
use sha2::Sha256;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long one attempt may take, connect to answer (the spec recommends 15-30 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// A signing key: the bytes of a `whsec_<base64>` secret.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    /// Parses `whsec_<base64>`; the message says what was wrong and what a secret looks like.
    pub fn parse(s: &str) -> Result<Secret, String> {
        let Some(b64) = s.strip_prefix("whsec_") else {
            return Err("-notify-secret: expected whsec_ followed by the base64 of the key (a Standard Webhooks \
                        secret, e.g. whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw)"
                .into());
        };
        let key =
            STANDARD.decode(b64).map_err(|e| format!("-notify-secret: the part after whsec_ is not base64 ({e})"))?;
        // The spec: random, at least 24 bytes, at most 64.
        if !(24..=64).contains(&key.len()) {
            return Err(format!(
                "-notify-secret: the key is {} bytes; Standard Webhooks keys are 24 to 64 random bytes \
                 (e.g. whsec_$(head -c 32 /dev/urandom | base64))",
                key.len()
            ));
        }
        Ok(Secret(key))
    }

    /// `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`.
    pub fn sign(&self, id: &str, timestamp: u64, body: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body.as_bytes());
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The webhook client: one connection pool for every endpoint, no redirects, a timeout per attempt.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    secret: Option<Secret>,
}

impl Sender {
    pub fn new(secret: Option<Secret>, timeout: Duration) -> Result<Sender, String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .user_agent(concat!("jaque/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("building the webhook client: {e}"))?;
        Ok(Sender { client, secret })
    }

    /// One attempt of a delivery. Never fails: every failure is a `Retry` with its reason.
    pub async fn send(&self, d: &Delivery) -> SendResult {
        let timestamp = unix_seconds(SystemTime::now());
        let mut req = self
            .client
            .post(&d.url)
            .header("content-type", "application/json")
            .header("webhook-id", &d.webhook_id)
            .header("webhook-timestamp", timestamp.to_string());
        if let Some(secret) = &self.secret {
            req = req.header("webhook-signature", secret.sign(&d.webhook_id, timestamp, &d.body));
        }
        match req.body(d.body.clone()).send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, SystemTime::now()));
                // Read the (small) answer to the end, so the connection goes back to the pool.
                let _ = resp.bytes().await;
                classify(status, retry_after)
            }
            Err(e) => {
                let what = if e.is_timeout() {
                    "timed out"
                } else if e.is_connect() {
                    "could not connect"
                } else {
                    "request failed"
                };
                // The error would name the url, credentials and all: the log line names it redacted.
                SendResult::Retry { after: None, reason: format!("{what}: {}", e.without_url()) }
            }
        }
    }
}

fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// What an HTTP status means for a delivery: only 2xx delivers; 410 disables the endpoint; anything else
/// (3xx included: redirects are not followed) is retried, not before `Retry-After` when the answer gave one.
pub fn classify(status: u16, retry_after: Option<Duration>) -> SendResult {
    match status {
        200..=299 => SendResult::Delivered,
        410 => SendResult::Gone,
        300..=399 => SendResult::Retry {
            after: retry_after,
            reason: format!("HTTP {status}: redirects are not followed; point -notify-webhook at the new URL"),
        },
        _ => SendResult::Retry { after: retry_after, reason: format!("HTTP {status}") },
    }
}

/// `Retry-After`: delay-seconds or an HTTP-date (a date in the past is no wait). Anything else is ignored.
pub fn parse_retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        // The vector of the Standard Webhooks reference libraries' "sign function works" test.
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, r#"{"test": 2432232314}"#),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        // Any change to id, timestamp or body changes it.
        assert_ne!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265331, r#"{"test": 2432232314}"#),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn bad_secrets_are_refused_with_what_was_wrong() {
        let e = Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap_err();
        assert!(e.contains("expected whsec_"), "{e}");
        let e = Secret::parse("whsec_not base64!").unwrap_err();
        assert!(e.contains("not base64"), "{e}");
        let e = Secret::parse("whsec_c2hvcnQ=").unwrap_err();
        assert!(e.contains("5 bytes") && e.contains("24 to 64"), "{e}");
        assert!(Secret::parse("whsec_").is_err());
    }

    #[test]
    fn only_2xx_delivers_410_disables_and_everything_else_is_retried() {
        for s in [200, 201, 204, 299] {
            assert_eq!(classify(s, None), SendResult::Delivered, "{s}");
        }
        assert_eq!(classify(410, Some(Duration::from_secs(3))), SendResult::Gone);
        for s in [301, 302, 307, 308, 400, 404, 429, 500, 502, 503, 504] {
            assert!(matches!(classify(s, None), SendResult::Retry { after: None, .. }), "{s}");
        }
        let SendResult::Retry { after, reason } = classify(302, None) else { panic!() };
        assert!(after.is_none() && reason.contains("not followed"), "{reason}");
        assert_eq!(
            classify(429, Some(Duration::from_secs(7))),
            SendResult::Retry { after: Some(Duration::from_secs(7)), reason: "HTTP 429".into() }
        );
    }

    fn delivery(url: String) -> Delivery {
        Delivery {
            op: 1,
            endpoint: jaque_core::notifier::EndpointId::of(&url),
            url,
            webhook_id: "jaque-7-0000000000000001".into(),
            body: "{}".into(),
            attempt: 1,
            object: jaque_core::ObjectId::new("web").unwrap(),
            seq: 7,
        }
    }

    /// A server that answers every connection with `answer` (or never, with `None`), and the requests it read.
    async fn server(answer: Option<&'static str>) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                    match answer {
                        Some(a) => {
                            let _ = s.write_all(a.as_bytes()).await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                });
            }
        });
        (url, rx)
    }

    #[tokio::test]
    async fn a_post_carries_the_headers_and_its_answer_is_classified() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sender = Sender::new(Some(secret.clone()), Duration::from_secs(5)).unwrap();
        let (url, mut requests) = server(Some("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")).await;
        assert_eq!(sender.send(&delivery(url)).await, SendResult::Delivered);
        let req = requests.recv().await.unwrap().to_ascii_lowercase();
        assert!(req.starts_with("post /hook"), "{req}");
        assert!(req.contains("webhook-id: jaque-7-0000000000000001"), "{req}");
        assert!(req.contains("content-type: application/json"), "{req}");
        let ts: u64 = req.split("webhook-timestamp: ").nth(1).unwrap().lines().next().unwrap().parse().unwrap();
        let sig = secret.sign("jaque-7-0000000000000001", ts, "{}").to_ascii_lowercase();
        assert!(req.contains(&format!("webhook-signature: {sig}")), "{req}");

        let (url, mut requests) =
            server(Some("HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n")).await;
        let r = sender.send(&delivery(url)).await;
        assert!(matches!(&r, SendResult::Retry { reason, .. } if reason.contains("302")), "{r:?}");
        requests.recv().await.unwrap();
        assert!(requests.try_recv().is_err(), "the redirect was not followed");

        let (url, _) = server(Some("HTTP/1.1 503 Unavailable\r\nRetry-After: 9\r\nContent-Length: 0\r\n\r\n")).await;
        let r = sender.send(&delivery(url)).await;
        assert_eq!(r, SendResult::Retry { after: Some(Duration::from_secs(9)), reason: "HTTP 503".into() });
    }

    #[tokio::test]
    async fn no_connection_and_no_answer_are_retried_and_an_unsigned_sender_signs_nothing() {
        let sender = Sender::new(None, Duration::from_millis(300)).unwrap();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let r = sender.send(&delivery(format!("http://{closed}/hook"))).await;
        assert!(
            matches!(&r, SendResult::Retry { after: None, reason } if reason.contains("could not connect")),
            "{r:?}"
        );
        let (url, mut requests) = server(None).await;
        let r = sender.send(&delivery(url)).await;
        assert!(matches!(&r, SendResult::Retry { after: None, reason } if reason.contains("timed out")), "{r:?}");
        let req = requests.recv().await.unwrap().to_ascii_lowercase();
        assert!(req.contains("webhook-id:") && !req.contains("webhook-signature"), "{req}");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO), "in the past");
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}

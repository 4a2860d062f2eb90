//! What jaque treats as a secret, and how it keeps one out of everything it shows.
//!
//! A secret is stored as given (the log, its snapshots and the wire carry it, because a probe must use it) and
//! rendered as [`REDACTED`] wherever it would be read: the API, the sink's store, notifications, logs. Secrets
//! today:
//! - the userinfo (`user:password@`, or a lone `token@`) of an http probe's URL: [`SensitiveUrl`];
//! - any URL's userinfo found in free text jaque passes on (check outputs, error messages): [`redact_urls_in`].
//!
//! Exec probe arguments are not secret: they are shown as given. A plugin that needs a credential reads it from
//! a file of its own (the README's security section).
//!
//! The URL rules follow the WHATWG URL standard for `http`/`https`, which is what the probe's client parses: the
//! authority starts after `://` and any further `/` or `\`, ends at the first `/`, `\`, `?` or `#`, and its
//! userinfo is everything before the last `@` in it.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

/// What a secret is shown as.
pub const REDACTED: &str = "***";

/// A URL whose userinfo is a credential. Serialized as given (the log must keep it for the probe); its
/// `Display` and `Debug` show it redacted, and [`SensitiveUrl::expose`] is the one way to the credential.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SensitiveUrl(String);

impl SensitiveUrl {
    pub fn new(url: impl Into<String>) -> SensitiveUrl {
        SensitiveUrl(url.into())
    }

    /// The URL as given, credentials included: for the probe itself, and for nothing that is shown.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its userinfo as `***`: what every read shows.
    pub fn redacted(&self) -> Cow<'_, str> {
        redact_url(&self.0)
    }

    /// Whether it carries a userinfo (something to hide).
    pub fn has_userinfo(&self) -> bool {
        userinfo(&self.0).is_some()
    }

    /// The strings to scrub from text that might echo this URL's credentials in some other shape than a URL:
    /// the userinfo as given, its password part and the password percent-decoded (at least 4 bytes each, so
    /// scrubbing never mangles text around a trivially short one).
    pub fn secrets(&self) -> Vec<Cow<'_, str>> {
        let Some(r) = userinfo(&self.0) else { return Vec::new() };
        let info = &self.0[r];
        let mut out = vec![Cow::Borrowed(info)];
        if let Some((_, password)) = info.split_once(':') {
            out.push(Cow::Borrowed(password));
            let decoded = percent_decode(password);
            if decoded != password {
                out.push(Cow::Owned(decoded));
            }
        }
        out.retain(|s| s.len() >= 4);
        out
    }
}

impl From<String> for SensitiveUrl {
    fn from(s: String) -> SensitiveUrl {
        SensitiveUrl(s)
    }
}

impl From<&str> for SensitiveUrl {
    fn from(s: &str) -> SensitiveUrl {
        SensitiveUrl(s.to_string())
    }
}

impl fmt::Display for SensitiveUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for SensitiveUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SensitiveUrl({:?})", self.redacted())
    }
}

/// Where a URL's authority ends: for a URL as given (WHATWG, special schemes), or in free text, where a URL
/// also ends at whitespace, a quote or an angle bracket (a URL printed by a client has those percent-encoded).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ends {
    Url,
    Text,
}

fn ends_authority(c: char, ends: Ends) -> bool {
    matches!(c, '/' | '\\' | '?' | '#')
        || (ends == Ends::Text && (c.is_whitespace() || c.is_control() || matches!(c, '"' | '<' | '>' | '`')))
}

/// The userinfo of the authority that starts at `from` (just after `://`): a non-empty byte range of `s`.
fn userinfo_at(s: &str, from: usize, ends: Ends) -> Option<Range<usize>> {
    let rest = &s[from..];
    let start = from + (rest.len() - rest.trim_start_matches(['/', '\\']).len());
    let authority = &s[start..];
    let len = authority.find(|c| ends_authority(c, ends)).unwrap_or(authority.len());
    let at = authority[..len].rfind('@')?;
    (at > 0).then_some(start..start + at)
}

/// The userinfo of `url` (`scheme://userinfo@host…`), if it has one.
pub fn userinfo(url: &str) -> Option<Range<usize>> {
    let (scheme, _) = url.split_once("://")?;
    let is_scheme = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !is_scheme {
        return None;
    }
    userinfo_at(url, scheme.len() + 3, Ends::Url)
}

/// `url` with its userinfo replaced by `***` (`http://***@host/`); unchanged when it has none.
pub fn redact_url(url: &str) -> Cow<'_, str> {
    match userinfo(url) {
        Some(r) => Cow::Owned(format!("{}{REDACTED}{}", &url[..r.start], &url[r.end..])),
        None => Cow::Borrowed(url),
    }
}

/// `text` with the userinfo of every URL in it (anything after a `://`) replaced by `***`: for text jaque passes
/// on that might echo a URL with its credentials (an HTTP client's error, a plugin's output, a parse error).
pub fn redact_urls_in(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let (mut copied, mut search) = (0, 0);
    while let Some(i) = text[search..].find("://") {
        let from = search + i + 3;
        match userinfo_at(text, from, Ends::Text) {
            Some(r) => {
                out.push_str(&text[copied..r.start]);
                out.push_str(REDACTED);
                copied = r.end;
                search = r.end;
            }
            None => search = from,
        }
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// `%XX` decoded where it makes UTF-8; anything else left as it is.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_shows_its_userinfo_as_stars() {
        let cases = [
            ("http://user:s3cr3t@h:1/p?q#f", "http://***@h:1/p?q#f"),
            ("https://token@h/", "https://***@h/"),
            ("http://:pw@h", "http://***@h"),
            ("http://a@b:c@h/", "http://***@h/"),
            ("http:///u:pw@h/", "http:///***@h/"),
            ("http://u:pw@h\\x@y", "http://***@h\\x@y"),
            ("http://h/path/@me", "http://h/path/@me"),
            ("http://h?x=a@b", "http://h?x=a@b"),
            ("http://h#a@b", "http://h#a@b"),
            ("http://@h/", "http://@h/"),
            ("http://h/", "http://h/"),
            ("not a url u:p@h", "not a url u:p@h"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
            assert_eq!(SensitiveUrl::from(url).to_string(), shown);
            assert!(!format!("{:?}", SensitiveUrl::from(url)).contains("pw"));
        }
    }

    #[test]
    fn urls_in_text_lose_their_userinfo() {
        let t = "error sending request for url (http://user:s3cr3t-pass@127.0.0.1:9/): refused";
        assert_eq!(redact_urls_in(t), "error sending request for url (http://***@127.0.0.1:9/): refused");
        let t = r#"invalid type: string "https://u:p@h", expected u16; also ftp://x:y@z and http://plain/"#;
        assert_eq!(
            redact_urls_in(t),
            r#"invalid type: string "https://***@h", expected u16; also ftp://***@z and http://plain/"#
        );
        assert!(matches!(redact_urls_in("HTTP 200"), Cow::Borrowed(_)));
        assert_eq!(redact_urls_in("see http://h and mail a@b"), "see http://h and mail a@b");
    }

    #[test]
    fn secrets_are_the_userinfo_and_the_password_as_given_and_decoded() {
        let u = SensitiveUrl::from("http://user:p%40ss-word@h/");
        assert_eq!(u.secrets(), vec!["user:p%40ss-word", "p%40ss-word", "p@ss-word"]);
        assert!(SensitiveUrl::from("http://h/").secrets().is_empty());
        assert_eq!(SensitiveUrl::from("http://a:b@h/").secrets(), Vec::<Cow<str>>::new(), "too short to scrub");
    }

    #[test]
    fn the_log_keeps_it_as_given() {
        let u = SensitiveUrl::from("http://u:pw@h/");
        assert_eq!(serde_json::to_string(&u).unwrap(), r#""http://u:pw@h/""#);
        assert_eq!(serde_json::from_str::<SensitiveUrl>(r#""http://u:pw@h/""#).unwrap().expose(), "http://u:pw@h/");
    }
}

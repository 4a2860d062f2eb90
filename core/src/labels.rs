//! Labels on objects and label selectors (Kubernetes syntax).
//!
//! This module owns what a label may be ([`Labels`], [`check_key`], [`check_value`]) and which objects a
//! selector picks ([`Selector`]). Both follow Kubernetes' label rules and selector grammar, so labels and
//! selectors written for Kubernetes mean the same here, with deliberate limits of our own: at most
//! [`MAX_LABELS`] labels per object (every log entry carries them), at most 63 characters in each dot-separated part of a key's prefix
//! (Kubernetes checks only the prefix's total length), selectors of at most [`MAX_SELECTOR_LEN`] bytes and
//! [`MAX_REQUIREMENTS`] requirements, no `>`/`<` operators and no empty values inside `in (…)` lists.
//!
//! A key is an optional prefix and `/` followed by a name, such as `team` or `example.com/team`:
//! - the name has 1 to 63 characters: ASCII letters, digits, `-`, `_` and `.`, with a letter or digit at both
//!   ends;
//! - the prefix is a DNS subdomain of at most 253 characters: dot-separated parts of 1 to 63 lowercase letters,
//!   digits and `-`, each beginning and ending with a letter or digit.
//!
//! A value is empty, or follows the rule of a name (1 to 63 characters, letters or digits at both ends).

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// The most characters in a key's name and in a value.
pub const MAX_NAME_LEN: usize = 63;
/// The most characters in a key's prefix (a DNS subdomain).
pub const MAX_PREFIX_LEN: usize = 253;
/// The most characters in one dot-separated part of a key's prefix.
pub const MAX_PREFIX_PART_LEN: usize = 63;
/// The most labels one object carries. Kubernetes has no such limit; jaque has one because every log entry
/// that carries an object's definition carries its labels too.
pub const MAX_LABELS: usize = 64;
/// The longest selector [`Selector::parse`] reads, in bytes.
pub const MAX_SELECTOR_LEN: usize = 4096;
/// The most requirements (comma-separated parts) in one selector.
pub const MAX_REQUIREMENTS: usize = 64;

/// Why a label, or a set of labels, is not allowed. Every message names the offending key or value (quoted,
/// shortened past 64 characters), says what is wrong and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// The key breaks the key rule; `reason` says how and what is allowed.
    #[error("label key {}: {reason}", quoted(.key))]
    Key { key: String, reason: String },
    /// The value breaks the value rule; `key` names the label when the value was checked as part of one.
    #[error("{}: {reason}", value_subject(.key, .value))]
    Value { key: Option<String>, value: String, reason: String },
    /// The same key twice in one object (only decoding can see this: a map holds a key once).
    #[error("label key {} appears more than once; an object has each key at most once", quoted(.key))]
    Duplicate { key: String },
    /// More labels than [`MAX_LABELS`].
    #[error("{count} labels: an object has at most {MAX_LABELS} (every log entry carries them)")]
    TooMany { count: usize },
}

fn value_subject(key: &Option<String>, value: &str) -> String {
    match key {
        Some(key) => format!("label {} value {}", quoted(key), quoted(value)),
        None => format!("label value {}", quoted(value)),
    }
}

/// Checks one label key: an optional DNS-subdomain prefix and `/`, then a name (see the module's rules).
pub fn check_key(key: &str) -> Result<(), LabelError> {
    match key_problem(key) {
        None => Ok(()),
        Some(reason) => Err(LabelError::Key { key: key.to_owned(), reason }),
    }
}

/// Checks one label value: empty, or 1 to 63 ASCII letters, digits, `-`, `_` and `.` with a letter or digit at
/// both ends. The error names no key; [`Labels::new`] adds it.
pub fn check_value(value: &str) -> Result<(), LabelError> {
    if value.is_empty() {
        return Ok(());
    }
    match word_problem(value, "value") {
        None => Ok(()),
        Some(reason) => Err(LabelError::Value { key: None, value: value.to_owned(), reason }),
    }
}

fn check_label(key: &str, value: &str) -> Result<(), LabelError> {
    check_key(key)?;
    check_value(value).map_err(|e| match e {
        LabelError::Value { value, reason, .. } => LabelError::Value { key: Some(key.to_owned()), value, reason },
        other => other,
    })
}

fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some(
            "a key must not be empty; it is a name of 1 to 63 characters, optionally after a DNS-subdomain \
             prefix and \"/\" (\"team\", \"example.com/team\")"
                .to_owned(),
        );
    }
    let (prefix, name) = match key.split_once('/') {
        None => (None, key),
        Some((prefix, name)) => (Some(prefix), name),
    };
    if name.contains('/') {
        return Some(
            "a key has at most one \"/\", between a DNS-subdomain prefix and the name (\"example.com/team\")"
                .to_owned(),
        );
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some(
                "the prefix before \"/\" is empty; write the name alone, or a DNS subdomain such as \
                 \"example.com\" before \"/\""
                    .to_owned(),
            );
        }
        if let Some(problem) = prefix_problem(prefix) {
            return Some(problem);
        }
        if name.is_empty() {
            return Some(format!("the name after \"/\" is empty; a name has 1 to {MAX_NAME_LEN} characters"));
        }
    }
    word_problem(name, "name")
}

/// What is wrong with a non-empty name or value, both of which follow one rule.
fn word_problem(word: &str, what: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    // Every character before the first bad one is ASCII, so its byte offset is also its character index.
    if let Some((i, c)) = word.char_indices().find(|&(_, c)| !allowed(c)) {
        return Some(format!(
            "the {what}'s character {}, {c:?}, is not allowed; allowed are ASCII letters, digits, '-', '_' and \
             '.', with a letter or digit at both ends",
            i + 1
        ));
    }
    if word.len() > MAX_NAME_LEN {
        return Some(format!("the {what} is {} characters long; at most {MAX_NAME_LEN} are allowed", word.len()));
    }
    let (first, last) = (word.as_bytes()[0] as char, word.as_bytes()[word.len() - 1] as char);
    if !first.is_ascii_alphanumeric() {
        return Some(format!("the {what} begins with {first:?}; it must begin and end with an ASCII letter or digit"));
    }
    if !last.is_ascii_alphanumeric() {
        return Some(format!("the {what} ends with {last:?}; it must begin and end with an ASCII letter or digit"));
    }
    None
}

/// What is wrong with a key's prefix, a DNS subdomain (RFC 1123).
fn prefix_problem(prefix: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.');
    if let Some((i, c)) = prefix.char_indices().find(|&(_, c)| !allowed(c)) {
        return Some(format!(
            "the prefix's character {}, {c:?}, is not allowed; a prefix is a DNS subdomain of lowercase letters, \
             digits, '-' and '.' (\"example.com\")",
            i + 1
        ));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Some(format!("the prefix is {} characters long; at most {MAX_PREFIX_LEN} are allowed", prefix.len()));
    }
    for part in prefix.split('.') {
        if part.is_empty() {
            return Some(
                "the prefix has an empty part (a dot at an end, or two dots in a row); a prefix is a DNS \
                 subdomain such as \"example.com\""
                    .to_owned(),
            );
        }
        if part.len() > MAX_PREFIX_PART_LEN {
            return Some(format!(
                "the prefix's part {} is {} characters long; each dot-separated part has at most \
                 {MAX_PREFIX_PART_LEN}",
                quoted(part),
                part.len()
            ));
        }
        let bytes = part.as_bytes();
        if !bytes[0].is_ascii_alphanumeric() || !bytes[bytes.len() - 1].is_ascii_alphanumeric() {
            return Some(format!(
                "the prefix's part {} must begin and end with a lowercase letter or digit",
                quoted(part)
            ));
        }
    }
    None
}

/// A string quoted for a message, shortened to its first 64 characters.
fn quoted(s: &str) -> String {
    shortened(s, 64)
}

fn shortened(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}", format!("{}…", &s[..cut])),
    }
}

/// The labels of one object: a map of key to value, every key and value valid and at most [`MAX_LABELS`] of
/// them. Ordered by key, so its encoding and iteration are deterministic. Encoded as a JSON object; decoding
/// checks every label (and refuses a key given twice) with the message of [`LabelError`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Labels(BTreeMap<String, String>);

impl Labels {
    /// No labels.
    pub const EMPTY: Labels = Labels(BTreeMap::new());

    /// The labels in `map`, or the first problem found: too many labels, else the first bad key or value in
    /// key order.
    pub fn new(map: BTreeMap<String, String>) -> Result<Labels, LabelError> {
        if map.len() > MAX_LABELS {
            return Err(LabelError::TooMany { count: map.len() });
        }
        for (key, value) in &map {
            check_label(key, value)?;
        }
        Ok(Labels(map))
    }

    /// The value of `key`, if the object has that label.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Whether the object has a label with `key` (of any value, the empty one too).
    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels as a map.
    pub fn as_map(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

impl TryFrom<BTreeMap<String, String>> for Labels {
    type Error = LabelError;

    fn try_from(map: BTreeMap<String, String>) -> Result<Labels, LabelError> {
        Labels::new(map)
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Labels, D::Error> {
        struct LabelsVisitor;

        impl<'de> Visitor<'de> for LabelsVisitor {
            type Value = Labels;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of label keys to label values (strings)")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Labels, A::Error> {
                let mut map = BTreeMap::new();
                while let Some((key, value)) = access.next_entry::<String, String>()? {
                    check_label(&key, &value).map_err(de::Error::custom)?;
                    if map.contains_key(&key) {
                        return Err(de::Error::custom(LabelError::Duplicate { key }));
                    }
                    if map.len() == MAX_LABELS {
                        // Count the rest without keeping it, so the message says how many there were.
                        let mut count = MAX_LABELS + 1;
                        while access.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                            count += 1;
                        }
                        return Err(de::Error::custom(LabelError::TooMany { count }));
                    }
                    map.insert(key, value);
                }
                Ok(Labels(map))
            }
        }

        deserializer.deserialize_map(LabelsVisitor)
    }
}

/// One comma-separated part of a [`Selector`]. An object matches a selector when it matches every requirement.
/// Only [`Selector::parse`] makes the requirements of a selector, so in a selector keys and values are valid
/// and the sets of `In` and `NotIn` are not empty.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Requirement {
    /// `key=value` or `key==value`: the object has the label with exactly this value.
    Equals { key: String, value: String },
    /// `key!=value`: the object has no label `key`, or has it with another value.
    NotEquals { key: String, value: String },
    /// `key in (v1,v2)`: the object has the label with one of these values.
    In { key: String, values: BTreeSet<String> },
    /// `key notin (v1,v2)`: the object has no label `key`, or has it with none of these values.
    NotIn { key: String, values: BTreeSet<String> },
    /// `key`: the object has the label, with any value.
    Exists { key: String },
    /// `!key`: the object has no label `key`.
    NotExists { key: String },
}

impl Requirement {
    /// The label key this requirement is about.
    pub fn key(&self) -> &str {
        match self {
            Requirement::Equals { key, .. }
            | Requirement::NotEquals { key, .. }
            | Requirement::In { key, .. }
            | Requirement::NotIn { key, .. }
            | Requirement::Exists { key }
            | Requirement::NotExists { key } => key,
        }
    }

    /// Whether an object with `labels` meets this requirement. As in Kubernetes, `!=` and `notin` are met by
    /// an object without the key.
    pub fn matches(&self, labels: &Labels) -> bool {
        let found = labels.get(self.key());
        match self {
            Requirement::Equals { value, .. } => found == Some(value.as_str()),
            Requirement::NotEquals { value, .. } => found != Some(value.as_str()),
            Requirement::In { values, .. } => found.is_some_and(|v| values.contains(v)),
            Requirement::NotIn { values, .. } => !found.is_some_and(|v| values.contains(v)),
            Requirement::Exists { .. } => found.is_some(),
            Requirement::NotExists { .. } => found.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let list = |f: &mut fmt::Formatter, key: &str, op: &str, values: &BTreeSet<String>| {
            write!(f, "{key} {op} (")?;
            for (i, value) in values.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                f.write_str(value)?;
            }
            f.write_str(")")
        };
        match self {
            Requirement::Equals { key, value } => write!(f, "{key}={value}"),
            Requirement::NotEquals { key, value } => write!(f, "{key}!={value}"),
            Requirement::In { key, values } => list(f, key, "in", values),
            Requirement::NotIn { key, values } => list(f, key, "notin", values),
            Requirement::Exists { key } => write!(f, "{key}"),
            Requirement::NotExists { key } => write!(f, "!{key}"),
        }
    }
}

/// A Kubernetes label selector: which objects a rule applies to, by their [`Labels`].
///
/// The text is comma-separated requirements, each one of `key=value`, `key==value`, `key!=value`,
/// `key in (v1,v2)`, `key notin (v1,v2)`, `key` (has the label) and `!key` (has not), with spaces, tabs and
/// line breaks allowed around every token. An object matches when it meets every requirement; the empty
/// selector (an empty or blank text) matches every object. `key=` and `key!=` compare with the empty value.
///
/// Unlike Kubernetes, `>` and `<` are refused, and an `in`/`notin` list needs at least one value and no empty
/// ones (Kubernetes reads `()` and `(a,)` as holding the empty value).
///
/// Requirements are kept sorted and without duplicates, so two texts that differ only in order, spacing,
/// `==` for `=` or repeated parts give equal selectors, and [`Display`](fmt::Display) writes the one canonical
/// text, which parses back to an equal selector. Serialized as that text; deserializing parses it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Reads a selector (grammar on [`Selector`]). The error quotes the selector, says what is wrong and at
    /// which byte offset.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let fail = |problem| SelectorError::new(text, problem);
        if text.len() > MAX_SELECTOR_LEN {
            return Err(fail(SelectorProblem::TooLong { len: text.len() }));
        }
        let mut parser = Parser { text, at: 0, last: None };
        let mut requirements = Vec::new();
        if parser.peek().tok != Tok::End {
            loop {
                let start = parser.peek().at;
                if requirements.len() == MAX_REQUIREMENTS {
                    return Err(fail(SelectorProblem::TooManyRequirements { position: start }));
                }
                requirements.push(parser.requirement().map_err(fail)?);
                let next = parser.peek();
                match next.tok {
                    Tok::End => break,
                    Tok::Comma => parser.bump(),
                    _ => return Err(fail(parser.unexpected("\",\" or the end", next))),
                }
            }
        }
        Ok(Selector::from_requirements(requirements))
    }

    fn from_requirements(mut requirements: Vec<Requirement>) -> Selector {
        requirements.sort_by(|a, b| a.key().cmp(b.key()).then_with(|| a.cmp(b)));
        requirements.dedup();
        Selector { requirements }
    }

    /// Whether an object with `labels` meets every requirement (always, for the empty selector).
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this is the selector that matches every object.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key, without duplicates.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl FromStr for Selector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Selector, SelectorError> {
        Selector::parse(text)
    }
}

impl Serialize for Selector {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Selector {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Selector, D::Error> {
        let text = String::deserialize(deserializer)?;
        Selector::parse(&text).map_err(de::Error::custom)
    }
}

/// A selector that does not parse: the selector as given (quoted in the message, shortened past 200
/// characters), and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("selector {}: {}", shortened(&.0.selector, 200), .0.problem)]
pub struct SelectorError(Box<SelectorErrorInner>);

// Boxed: an `Err` as large as the problem would make every `Result` of a parse that large.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SelectorErrorInner {
    selector: String,
    problem: SelectorProblem,
}

impl SelectorError {
    fn new(selector: &str, problem: SelectorProblem) -> SelectorError {
        SelectorError(Box::new(SelectorErrorInner { selector: selector.to_owned(), problem }))
    }

    /// The selector as given.
    pub fn selector(&self) -> &str {
        &self.0.selector
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &SelectorProblem {
        &self.0.problem
    }

    /// The byte offset in the selector where the problem is: its length for a problem at the end, and
    /// [`MAX_SELECTOR_LEN`] for a selector too long.
    pub fn position(&self) -> usize {
        match &self.0.problem {
            SelectorProblem::TooLong { .. } => MAX_SELECTOR_LEN,
            SelectorProblem::TooManyRequirements { position }
            | SelectorProblem::Unexpected { position, .. }
            | SelectorProblem::Label { position, .. }
            | SelectorProblem::NoValues { position, .. }
            | SelectorProblem::EmptyValue { position, .. }
            | SelectorProblem::Unsupported { position, .. } => *position,
        }
    }
}

/// What is wrong with a selector. Positions are byte offsets into the selector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorProblem {
    #[error("it is {len} bytes long; at most {MAX_SELECTOR_LEN} are allowed")]
    TooLong { len: usize },
    #[error(
        "it has more than {MAX_REQUIREMENTS} requirements (the next begins at position {position}); at most \
         {MAX_REQUIREMENTS} are allowed"
    )]
    TooManyRequirements { position: usize },
    /// A token the grammar does not allow here. `after` is the token before it (none at the start), `found`
    /// the token itself (none at the end).
    #[error("{}expected {expected} at position {position}, found {}", after_text(.after), found_text(.found))]
    Unexpected { after: Option<String>, expected: &'static str, position: usize, found: Option<String> },
    /// A key or value that is not a valid label key or value.
    #[error("requirement {}: at position {position}, {error}", quoted(.requirement))]
    Label { requirement: String, position: usize, error: LabelError },
    #[error(
        "requirement {}: the list at position {position} is empty; \"in\" and \"notin\" need at least one value",
        quoted(.requirement)
    )]
    NoValues { requirement: String, position: usize },
    #[error(
        "requirement {}: empty value in the list at position {position}; a list holds non-empty values \
         separated by \",\" (\"key=\" matches the empty value)",
        quoted(.requirement)
    )]
    EmptyValue { requirement: String, position: usize },
    #[error(
        "{op:?} at position {position} is not supported; the operators are =, ==, !=, in and notin, a key alone \
         (has the label) and \"!key\" (has not)"
    )]
    Unsupported { op: &'static str, position: usize },
}

fn after_text(after: &Option<String>) -> String {
    after.as_ref().map_or_else(String::new, |t| format!("after {} ", quoted(t)))
}

fn found_text(found: &Option<String>) -> String {
    found.as_ref().map_or_else(|| "the end".to_owned(), |t| quoted(t))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Equals,
    DoubleEquals,
    NotEquals,
    Bang,
    Comma,
    Open,
    Close,
    Less,
    Greater,
    End,
}

impl<'a> Tok<'a> {
    fn text(self) -> &'a str {
        match self {
            Tok::Word(word) => word,
            Tok::Equals => "=",
            Tok::DoubleEquals => "==",
            Tok::NotEquals => "!=",
            Tok::Bang => "!",
            Tok::Comma => ",",
            Tok::Open => "(",
            Tok::Close => ")",
            Tok::Less => "<",
            Tok::Greater => ">",
            Tok::End => "",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    /// Byte offset of the token's first character.
    at: usize,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// The characters that end a word (as in Kubernetes' lexer). All are ASCII, so a word ends on a char boundary.
fn is_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'<' | b'>')
}

/// A recursive-descent reader of the selector grammar. It only ever looks one token ahead: every decision
/// `peek`s, then `bump`s past the token it took, so an error's token is the one peeked and `last` the one
/// before it.
struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the first character not yet read.
    at: usize,
    last: Option<Token<'a>>,
}

impl<'a> Parser<'a> {
    /// The next token and the offset just past it.
    fn lex(&self) -> (Token<'a>, usize) {
        let bytes = self.text.as_bytes();
        let mut i = self.at;
        while i < bytes.len() && is_space(bytes[i]) {
            i += 1;
        }
        if i == bytes.len() {
            return (Token { tok: Tok::End, at: i }, i);
        }
        let second = bytes.get(i + 1).copied();
        let (tok, len) = match bytes[i] {
            b'!' if second == Some(b'=') => (Tok::NotEquals, 2),
            b'!' => (Tok::Bang, 1),
            b'=' if second == Some(b'=') => (Tok::DoubleEquals, 2),
            b'=' => (Tok::Equals, 1),
            b',' => (Tok::Comma, 1),
            b'(' => (Tok::Open, 1),
            b')' => (Tok::Close, 1),
            b'<' => (Tok::Less, 1),
            b'>' => (Tok::Greater, 1),
            _ => {
                let len = bytes[i..].iter().position(|&b| is_space(b) || is_symbol(b)).unwrap_or(bytes.len() - i);
                (Tok::Word(&self.text[i..i + len]), len)
            }
        };
        (Token { tok, at: i }, i + len)
    }

    fn peek(&self) -> Token<'a> {
        self.lex().0
    }

    fn bump(&mut self) {
        let (token, end) = self.lex();
        self.at = end;
        self.last = Some(token);
    }

    fn unexpected(&self, expected: &'static str, found: Token<'a>) -> SelectorProblem {
        match found.tok {
            Tok::Less => return SelectorProblem::Unsupported { op: "<", position: found.at },
            Tok::Greater => return SelectorProblem::Unsupported { op: ">", position: found.at },
            _ => {}
        }
        SelectorProblem::Unexpected {
            after: self.last.map(|t| t.tok.text().to_owned()),
            expected,
            position: found.at,
            found: (found.tok != Tok::End).then(|| found.tok.text().to_owned()),
        }
    }

    /// The text of the requirement that begins at `start`: up to the next "," outside parentheses.
    fn requirement_text(&self, start: usize) -> String {
        let mut depth = 0usize;
        let rest = &self.text[start..];
        let end = rest
            .bytes()
            .position(|b| match b {
                b'(' => {
                    depth += 1;
                    false
                }
                b')' => {
                    depth = depth.saturating_sub(1);
                    false
                }
                b',' => depth == 0,
                _ => false,
            })
            .unwrap_or(rest.len());
        rest[..end].trim_matches(|c: char| c.is_ascii() && is_space(c as u8)).to_owned()
    }

    fn label_error(&self, start: usize, position: usize, error: LabelError) -> SelectorProblem {
        SelectorProblem::Label { requirement: self.requirement_text(start), position, error }
    }

    /// One requirement, from its first token to just before the "," or end that follows it.
    fn requirement(&mut self) -> Result<Requirement, SelectorProblem> {
        let first = self.peek();
        let start = first.at;
        let negated = first.tok == Tok::Bang;
        if negated {
            self.bump();
        }
        let token = self.peek();
        let Tok::Word(key) = token.tok else {
            let expected = if negated { "a key" } else { "a key or \"!\"" };
            return Err(self.unexpected(expected, token));
        };
        check_key(key).map_err(|e| self.label_error(start, token.at, e))?;
        self.bump();
        let key = key.to_owned();
        if negated {
            return Ok(Requirement::NotExists { key });
        }
        let op = self.peek();
        match op.tok {
            Tok::End | Tok::Comma => Ok(Requirement::Exists { key }),
            Tok::Equals | Tok::DoubleEquals | Tok::NotEquals => {
                self.bump();
                let value = self.exact_value(start, &key)?;
                Ok(if op.tok == Tok::NotEquals {
                    Requirement::NotEquals { key, value }
                } else {
                    Requirement::Equals { key, value }
                })
            }
            Tok::Word("in") => {
                self.bump();
                let values = self.values(start, &key)?;
                Ok(Requirement::In { key, values })
            }
            Tok::Word("notin") => {
                self.bump();
                let values = self.values(start, &key)?;
                Ok(Requirement::NotIn { key, values })
            }
            _ => Err(self.unexpected("an operator (=, ==, !=, in, notin), \",\" or the end", op)),
        }
    }

    /// The value after `=`, `==` or `!=`: a word, or the empty value when the requirement ends there.
    fn exact_value(&mut self, start: usize, key: &str) -> Result<String, SelectorProblem> {
        let token = self.peek();
        match token.tok {
            Tok::End | Tok::Comma => Ok(String::new()),
            Tok::Word(value) => {
                check_label(key, value).map_err(|e| self.label_error(start, token.at, e))?;
                self.bump();
                Ok(value.to_owned())
            }
            _ => Err(self.unexpected("a value, \",\" or the end", token)),
        }
    }

    /// A parenthesised list of at least one value, after `in` or `notin`.
    fn values(&mut self, start: usize, key: &str) -> Result<BTreeSet<String>, SelectorProblem> {
        let open = self.peek();
        if open.tok != Tok::Open {
            return Err(self.unexpected("\"(\"", open));
        }
        self.bump();
        let mut values = BTreeSet::new();
        loop {
            let token = self.peek();
            match token.tok {
                Tok::Word(value) => {
                    check_label(key, value).map_err(|e| self.label_error(start, token.at, e))?;
                    self.bump();
                    values.insert(value.to_owned());
                }
                Tok::Close if values.is_empty() => {
                    return Err(SelectorProblem::NoValues {
                        requirement: self.requirement_text(start),
                        position: open.at,
                    });
                }
                Tok::Comma | Tok::Close => {
                    return Err(SelectorProblem::EmptyValue {
                        requirement: self.requirement_text(start),
                        position: token.at,
                    });
                }
                _ => return Err(self.unexpected("a value", token)),
            }
            let next = self.peek();
            match next.tok {
                Tok::Comma => self.bump(),
                Tok::Close => {
                    self.bump();
                    return Ok(values);
                }
                _ => return Err(self.unexpected("\",\" or \")\"", next)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).expect("valid labels")
    }

    fn sel(text: &str) -> Selector {
        Selector::parse(text).unwrap_or_else(|e| panic!("{text:?} does not parse: {e}"))
    }

    fn parse_err(text: &str) -> SelectorError {
        match Selector::parse(text) {
            Ok(s) => panic!("{text:?} parses as {s:?}"),
            Err(e) => e,
        }
    }

    fn key_err(key: &str) -> String {
        check_key(key).expect_err(key).to_string()
    }

    fn value_err(value: &str) -> String {
        check_value(value).expect_err(value).to_string()
    }

    // Keys and values.

    #[test]
    fn names_of_1_to_63_characters_are_keys() {
        for key in ["a", "A", "0", "team", "Team_Name-2.x", "a.b", "a-b", "a_b", &"x".repeat(63)] {
            assert_eq!(check_key(key), Ok(()), "{key}");
        }
    }

    #[test]
    fn a_name_of_64_characters_is_refused_saying_the_limit() {
        let msg = key_err(&"x".repeat(64));
        assert!(msg.contains("64 characters long") && msg.contains("at most 63"), "{msg}");
        let msg = key_err(&format!("example.com/{}", "x".repeat(64)));
        assert!(msg.contains("the name is 64 characters long"), "{msg}");
    }

    #[test]
    fn a_bad_character_in_a_key_is_named_with_its_position_and_what_is_allowed() {
        let msg = key_err("Team!");
        assert!(msg.starts_with("label key \"Team!\": "), "{msg}");
        assert!(msg.contains("the name's character 5, '!', is not allowed"), "{msg}");
        assert!(msg.contains("allowed are ASCII letters, digits, '-', '_' and '.'"), "{msg}");
        for key in ["a b", "a:b", "é", "a\u{0}b", "a*"] {
            assert!(key_err(key).contains("allowed are"), "{key}");
        }
    }

    #[test]
    fn a_name_must_begin_and_end_with_a_letter_or_digit() {
        for key in ["-a", "a-", "_a", "a_", ".a", "a.", "-", "."] {
            let msg = key_err(key);
            assert!(msg.contains("must begin and end with an ASCII letter or digit"), "{key}: {msg}");
        }
        assert!(key_err("-a").contains("begins with '-'"));
        assert!(key_err("a.").contains("ends with '.'"));
    }

    #[test]
    fn empty_keys_and_empty_halves_are_refused() {
        assert!(key_err("").contains("must not be empty"));
        assert!(key_err("/team").contains("prefix before \"/\" is empty"));
        assert!(key_err("example.com/").contains("name after \"/\" is empty"));
        assert!(key_err("a/b/c").contains("at most one \"/\""));
    }

    #[test]
    fn prefixes_are_dns_subdomains() {
        for key in ["example.com/team", "a/b", "0/b", "a-b.c-d/x", "k8s.io/app", "1.2.3/x"] {
            assert_eq!(check_key(key), Ok(()), "{key}");
        }
        let msg = key_err("Example.com/team");
        assert!(msg.contains("the prefix's character 1, 'E', is not allowed") && msg.contains("lowercase"), "{msg}");
        assert!(key_err("ex_ample.com/team").contains("prefix's character 3, '_'"));
        assert!(key_err("example..com/team").contains("empty part"));
        assert!(key_err(".example.com/team").contains("empty part"));
        assert!(key_err("example.com./team").contains("empty part"));
        let msg = key_err("-example.com/team");
        assert!(msg.contains("part \"-example\" must begin and end"), "{msg}");
        assert!(key_err("example-.com/team").contains("part \"example-\""));
    }

    #[test]
    fn a_prefix_of_253_characters_is_allowed_and_254_is_not() {
        // Three parts of 63, three dots, and a last part of 61 (or 62).
        let part = "a".repeat(63);
        let p253 = format!("{part}.{part}.{part}.{}", "b".repeat(61));
        assert_eq!(p253.len(), 253);
        assert_eq!(check_key(&format!("{p253}/name")), Ok(()));
        let p254 = format!("{part}.{part}.{part}.{}", "b".repeat(62));
        assert_eq!(p254.len(), 254);
        let msg = key_err(&format!("{p254}/name"));
        assert!(msg.contains("prefix is 254 characters long; at most 253"), "{msg}");
    }

    #[test]
    fn a_prefix_part_of_64_characters_is_refused() {
        assert_eq!(check_key(&format!("{}.com/x", "a".repeat(63))), Ok(()));
        let msg = key_err(&format!("{}.com/x", "a".repeat(64)));
        assert!(msg.contains("64 characters long; each dot-separated part has at most 63"), "{msg}");
    }

    #[test]
    fn values_are_empty_or_name_like_up_to_63_characters() {
        for value in ["", "a", "prod", "v1.2.3", "A_b-C", "0", &"v".repeat(63)] {
            assert_eq!(check_value(value), Ok(()), "{value}");
        }
        let msg = value_err(&"v".repeat(64));
        assert!(msg.contains("the value is 64 characters long; at most 63"), "{msg}");
        assert!(value_err("-x").contains("the value begins with '-'"));
        assert!(value_err("x.").contains("the value ends with '.'"));
        let msg = value_err("a/b");
        assert!(msg.starts_with("label value \"a/b\": the value's character 2, '/', is not allowed"), "{msg}");
        assert!(value_err("a b").contains("' '"));
    }

    #[test]
    fn long_offending_text_is_shortened_in_messages() {
        let msg = key_err(&"x".repeat(5000));
        assert!(msg.len() < 300, "{msg}");
        assert!(msg.contains("5000 characters long"), "{msg}");
    }

    // Labels.

    #[test]
    fn labels_name_the_key_of_a_bad_value() {
        let map = BTreeMap::from([("team".to_owned(), "-ops".to_owned())]);
        let msg = Labels::new(map).expect_err("bad value").to_string();
        assert!(msg.starts_with("label \"team\" value \"-ops\": the value begins with '-'"), "{msg}");
    }

    #[test]
    fn labels_hold_at_most_64() {
        let map = |n: usize| (0..n).map(|i| (format!("k{i}"), "v".to_owned())).collect::<BTreeMap<_, _>>();
        assert_eq!(Labels::new(map(MAX_LABELS)).map(|l| l.len()), Ok(64));
        let msg = Labels::new(map(65)).expect_err("65 labels").to_string();
        assert!(msg.contains("65 labels") && msg.contains("at most 64"), "{msg}");
    }

    #[test]
    fn labels_read_back_in_key_order() {
        let l = labels(&[("b", "2"), ("a", "1"), ("example.com/c", "")]);
        assert_eq!(l.iter().collect::<Vec<_>>(), [("a", "1"), ("b", "2"), ("example.com/c", "")]);
        assert_eq!(l.get("a"), Some("1"));
        assert_eq!(l.get("example.com/c"), Some(""));
        assert_eq!(l.get("z"), None);
        assert!(l.contains_key("b") && !l.contains_key("z"));
        assert!(!l.is_empty() && Labels::default().is_empty());
        assert_eq!(l.as_map().len(), 3);
    }

    #[test]
    fn labels_encode_as_a_json_object_and_decode_checked() {
        let l = labels(&[("team", "ops"), ("example.com/tier", "")]);
        let json = serde_json::to_string(&l).expect("encodes");
        assert_eq!(json, r#"{"example.com/tier":"","team":"ops"}"#);
        assert_eq!(serde_json::from_str::<Labels>(&json).expect("decodes"), l);

        let err = serde_json::from_str::<Labels>(r#"{"Team!":"x"}"#).expect_err("bad key").to_string();
        assert!(err.contains("label key \"Team!\": the name's character 5, '!', is not allowed"), "{err}");
        let err = serde_json::from_str::<Labels>(r#"{"team":"x y"}"#).expect_err("bad value").to_string();
        assert!(err.contains("label \"team\" value \"x y\""), "{err}");
        let err = serde_json::from_str::<Labels>(r#"{"a":"1","a":"2"}"#).expect_err("duplicate").to_string();
        assert!(err.contains("label key \"a\" appears more than once"), "{err}");
        let err = serde_json::from_str::<Labels>(r#"{"a":1}"#).expect_err("number").to_string();
        assert!(err.contains("expected a string"), "{err}");
        let err = serde_json::from_str::<Labels>(r#"["a"]"#).expect_err("array").to_string();
        assert!(err.contains("an object of label keys"), "{err}");

        let many: String = (0..70).map(|i| format!("\"k{i}\":\"v\"")).collect::<Vec<_>>().join(",");
        let err = serde_json::from_str::<Labels>(&format!("{{{many}}}")).expect_err("too many").to_string();
        assert!(err.contains("70 labels: an object has at most 64"), "{err}");
    }

    // Selectors: the operators and their semantics.

    #[test]
    fn the_empty_selector_matches_everything() {
        for text in ["", " ", "\t\r\n "] {
            let s = sel(text);
            assert!(s.is_empty());
            assert!(s.matches(&Labels::default()));
            assert!(s.matches(&labels(&[("a", "b")])));
            assert_eq!(s.to_string(), "");
        }
        assert_eq!(Selector::default(), sel(""));
    }

    #[test]
    fn equals_and_double_equals_match_only_that_value() {
        for text in ["env=prod", "env==prod", " env = prod ", "env\t==\nprod"] {
            let s = sel(text);
            assert_eq!(s.to_string(), "env=prod");
            assert!(s.matches(&labels(&[("env", "prod")])), "{text}");
            assert!(!s.matches(&labels(&[("env", "dev")])), "{text}");
            assert!(!s.matches(&labels(&[("other", "prod")])), "{text}");
            assert!(!s.matches(&Labels::default()), "{text}");
        }
    }

    #[test]
    fn not_equals_matches_objects_without_the_key() {
        let s = sel("env!=prod");
        assert!(!s.matches(&labels(&[("env", "prod")])));
        assert!(s.matches(&labels(&[("env", "dev")])));
        assert!(s.matches(&labels(&[("other", "prod")])));
        assert!(s.matches(&Labels::default()));
    }

    #[test]
    fn in_matches_one_of_the_values_and_needs_the_key() {
        let s = sel("tier in (web, api)");
        assert_eq!(s.to_string(), "tier in (api,web)");
        assert!(s.matches(&labels(&[("tier", "web")])));
        assert!(s.matches(&labels(&[("tier", "api")])));
        assert!(!s.matches(&labels(&[("tier", "db")])));
        assert!(!s.matches(&Labels::default()));
    }

    #[test]
    fn notin_matches_objects_without_the_key() {
        let s = sel("tier notin (web,api)");
        assert!(!s.matches(&labels(&[("tier", "web")])));
        assert!(s.matches(&labels(&[("tier", "db")])));
        assert!(s.matches(&labels(&[("other", "web")])));
        assert!(s.matches(&Labels::default()));
    }

    #[test]
    fn exists_and_not_exists_look_at_the_key_only() {
        let has = sel("env");
        let lacks = sel("!env");
        for l in [labels(&[("env", "")]), labels(&[("env", "prod")])] {
            assert!(has.matches(&l) && !lacks.matches(&l));
        }
        for l in [Labels::default(), labels(&[("envx", "prod")])] {
            assert!(!has.matches(&l) && lacks.matches(&l));
        }
        assert_eq!(sel(" ! env ").to_string(), "!env");
    }

    #[test]
    fn an_empty_value_compares_with_the_empty_label_value() {
        let s = sel("env=");
        assert!(s.matches(&labels(&[("env", "")])));
        assert!(!s.matches(&labels(&[("env", "x")])));
        assert!(!s.matches(&Labels::default()));
        let s = sel("env!=,a");
        assert_eq!(s.to_string(), "a,env!=");
        assert!(s.matches(&labels(&[("a", ""), ("env", "x")])));
        assert!(!s.matches(&labels(&[("a", ""), ("env", "")])));
    }

    #[test]
    fn every_requirement_must_match() {
        let s = sel("env=prod, tier in (web), !canary, team, zone notin (eu)");
        assert_eq!(s.requirements().len(), 5);
        let ok = labels(&[("env", "prod"), ("tier", "web"), ("team", "ops"), ("zone", "us")]);
        assert!(s.matches(&ok));
        let mut broken = ok.as_map().clone();
        broken.insert("canary".into(), "yes".into());
        assert!(!s.matches(&Labels::new(broken).expect("valid")));
        let mut broken = ok.as_map().clone();
        broken.remove("team");
        assert!(!s.matches(&Labels::new(broken).expect("valid")));
    }

    #[test]
    fn keywords_are_keys_and_values_where_a_key_or_value_goes() {
        let s = sel("in in (in,notin),notin=in");
        assert_eq!(s.to_string(), "in in (in,notin),notin=in");
        assert!(s.matches(&labels(&[("in", "notin"), ("notin", "in")])));
        assert!(!s.matches(&labels(&[("in", "x"), ("notin", "in")])));
        assert!(sel("in").matches(&labels(&[("in", "")])));
        assert!(sel("!notin").matches(&labels(&[("in", "")])));
        assert!(sel("a notin (in)").matches(&labels(&[("a", "notin")])));
    }

    #[test]
    fn prefixed_keys_work_in_selectors() {
        let s = sel("example.com/team=ops,!k8s.io/canary");
        assert!(s.matches(&labels(&[("example.com/team", "ops")])));
        assert!(!s.matches(&labels(&[("example.com/team", "ops"), ("k8s.io/canary", "")])));
    }

    #[test]
    fn order_spacing_and_repeats_give_equal_selectors() {
        assert_eq!(sel("b=1,a=2"), sel(" a == 2 , b = 1 "));
        assert_eq!(sel("a=1,a=1"), sel("a=1"));
        assert_eq!(sel("t in (x,y,x)"), sel("t in (y,x)"));
        assert_eq!(sel("b,a!=1,!c").to_string(), "a!=1,b,!c");
    }

    #[test]
    fn selectors_are_serialized_as_their_text() {
        let s = sel("tier in (web,api),env");
        let json = serde_json::to_string(&s).expect("encodes");
        assert_eq!(json, r#""env,tier in (api,web)""#);
        assert_eq!(serde_json::from_str::<Selector>(&json).expect("decodes"), s);
        let err = serde_json::from_str::<Selector>(r#""a in b""#).expect_err("bad").to_string();
        assert!(err.contains("selector \"a in b\": after \"in\" expected \"(\" at position 5"), "{err}");
        assert_eq!("a=b".parse::<Selector>(), Ok(sel("a=b")));
    }

    // Selectors: errors.

    #[test]
    fn an_error_says_what_was_expected_where_and_after_what() {
        let e = parse_err("env=prod,tier in web");
        assert_eq!(e.position(), 17);
        assert_eq!(
            e.to_string(),
            "selector \"env=prod,tier in web\": after \"in\" expected \"(\" at position 17, found \"web\""
        );
    }

    #[test]
    fn misplaced_tokens_are_errors_at_their_position() {
        let cases: &[(&str, usize, &str)] = &[
            (",a", 0, "expected a key or \"!\" at position 0, found \",\""),
            ("a,", 2, "after \",\" expected a key or \"!\" at position 2, found the end"),
            ("a,,b", 2, "after \",\" expected a key or \"!\" at position 2, found \",\""),
            ("a b", 2, "after \"a\" expected an operator (=, ==, !=, in, notin), \",\" or the end at position 2"),
            ("a=b c", 4, "after \"b\" expected \",\" or the end at position 4, found \"c\""),
            ("a=(b)", 2, "after \"=\" expected a value, \",\" or the end at position 2, found \"(\""),
            ("a===b", 3, "after \"==\" expected a value, \",\" or the end at position 3, found \"=\""),
            ("!", 1, "after \"!\" expected a key at position 1, found the end"),
            ("!!a", 1, "after \"!\" expected a key at position 1, found \"!\""),
            ("!a=b", 2, "after \"a\" expected \",\" or the end at position 2, found \"=\""),
            ("a in", 4, "after \"in\" expected \"(\" at position 4, found the end"),
            ("a in (b", 7, "after \"b\" expected \",\" or \")\" at position 7, found the end"),
            ("a in (b c)", 8, "after \"b\" expected \",\" or \")\" at position 8, found \"c\""),
            ("a notin (b,=)", 11, "after \",\" expected a value at position 11, found \"=\""),
            ("a in (b))", 8, "after \")\" expected \",\" or the end at position 8, found \")\""),
            ("=b", 0, "expected a key or \"!\" at position 0, found \"=\""),
        ];
        for &(text, position, message) in cases {
            let e = parse_err(text);
            assert_eq!(e.position(), position, "{text}: {e}");
            assert!(e.to_string().starts_with(&format!("selector {text:?}: ")), "{e}");
            assert!(e.to_string().contains(message), "{text}: {e}\nwanted: {message}");
        }
    }

    #[test]
    fn bad_keys_and_values_name_the_requirement_and_the_label_rule() {
        let e = parse_err("env=prod, Team_ = x");
        assert_eq!(e.position(), 10);
        let msg = e.to_string();
        assert!(
            msg.contains("requirement \"Team_ = x\": at position 10, label key \"Team_\": the name ends with '_'"),
            "{msg}"
        );

        let msg = parse_err("env=-prod").to_string();
        assert!(msg.contains("requirement \"env=-prod\": at position 4, label \"env\" value \"-prod\""), "{msg}");
        let msg = parse_err("a=1, tier in (web, -api), b").to_string();
        assert!(
            msg.contains("requirement \"tier in (web, -api)\": at position 19, label \"tier\" value \"-api\""),
            "{msg}"
        );
        let msg = parse_err(&format!("k={}", "v".repeat(64))).to_string();
        assert!(msg.contains("64 characters long; at most 63"), "{msg}");
        let msg = parse_err("Ex.com/a").to_string();
        assert!(msg.contains("the prefix's character 1, 'E', is not allowed"), "{msg}");
        let msg = parse_err("!a/b/c").to_string();
        assert!(msg.contains("at position 1, label key \"a/b/c\""), "{msg}");
        let msg = parse_err("a:b").to_string();
        assert!(msg.contains("label key \"a:b\": the name's character 2, ':'"), "{msg}");
    }

    #[test]
    fn lists_need_at_least_one_value_and_no_empty_ones() {
        let e = parse_err("tier in ()");
        assert_eq!(e.position(), 8);
        assert!(e.to_string().contains("requirement \"tier in ()\": the list at position 8 is empty"), "{e}");
        assert!(parse_err("tier notin ( )").to_string().contains("need at least one value"));
        for (text, position) in [("t in (a,)", 8), ("t in (,a)", 6), ("t in (a,,b)", 8)] {
            let e = parse_err(text);
            assert_eq!(e.position(), position, "{text}");
            assert!(e.to_string().contains("empty value in the list"), "{e}");
        }
    }

    #[test]
    fn greater_and_less_than_are_refused_by_name() {
        for (text, position) in [("a>1", 1), ("a < 1", 2), ("a=1,b>2", 5), ("a in (<)", 6)] {
            let e = parse_err(text);
            assert_eq!(e.position(), position, "{text}");
            assert!(e.to_string().contains("at position") && e.to_string().contains("is not supported"), "{e}");
        }
    }

    #[test]
    fn selector_length_and_requirement_count_are_limited() {
        let long = format!("{}a", " ".repeat(MAX_SELECTOR_LEN));
        let e = parse_err(&long);
        assert!(e.to_string().contains("it is 4097 bytes long; at most 4096 are allowed"), "{e}");
        assert!(e.to_string().len() < 400);
        assert_eq!(sel(&format!("{}a", " ".repeat(MAX_SELECTOR_LEN - 1))).to_string(), "a");

        let reqs = |n: usize| (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>().join(",");
        assert_eq!(sel(&reqs(64)).requirements().len(), 64);
        let text = reqs(65);
        let e = parse_err(&text);
        assert_eq!(e.position(), text.rfind(',').expect("a comma") + 1);
        assert!(e.to_string().contains("more than 64 requirements"), "{e}");
    }

    #[test]
    fn error_positions_are_within_the_text() {
        for text in ["a in (b", "é=x", "a=é", "ünï", "a,\u{3000}", "(", ")"] {
            let e = parse_err(text);
            assert!(e.position() <= text.len() && text.is_char_boundary(e.position()), "{text}: {e}");
        }
    }

    // Properties.

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z0-9]",
            "[A-Za-z0-9][A-Za-z0-9._-]{0,61}[A-Za-z0-9]",
            Just("in".to_owned()),
            Just("notin".to_owned()),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        let prefix = "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?){0,3}";
        (proptest::option::of(prefix), name()).prop_map(|(prefix, name)| match prefix {
            Some(prefix) => format!("{prefix}/{name}"),
            None => name,
        })
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), name()]
    }

    fn requirement() -> impl Strategy<Value = Requirement> {
        let values = || proptest::collection::btree_set(name(), 1..4);
        prop_oneof![
            (key(), value()).prop_map(|(key, value)| Requirement::Equals { key, value }),
            (key(), value()).prop_map(|(key, value)| Requirement::NotEquals { key, value }),
            (key(), values()).prop_map(|(key, values)| Requirement::In { key, values }),
            (key(), values()).prop_map(|(key, values)| Requirement::NotIn { key, values }),
            key().prop_map(|key| Requirement::Exists { key }),
            key().prop_map(|key| Requirement::NotExists { key }),
        ]
    }

    fn selector() -> impl Strategy<Value = Selector> {
        proptest::collection::vec(requirement(), 0..8).prop_map(Selector::from_requirements)
    }

    fn any_labels() -> impl Strategy<Value = Labels> {
        proptest::collection::btree_map(prop_oneof![key(), "[a-c]"], prop_oneof![value(), "[a-c]"], 0..6)
            .prop_map(|m| Labels::new(m).expect("generated labels are valid"))
    }

    /// Text near the grammar: its words, symbols and spaces in any order.
    fn selector_like_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("a"),
            Just("b"),
            Just("in"),
            Just("notin"),
            Just("x.io/a"),
            Just("="),
            Just("=="),
            Just("!="),
            Just("!"),
            Just(","),
            Just("("),
            Just(")"),
            Just(" "),
            Just("<"),
            Just("é"),
            Just("-"),
        ];
        proptest::collection::vec(piece, 0..16).prop_map(|p| p.concat())
    }

    fn check_round_trip(s: &Selector) -> Result<(), TestCaseError> {
        let text = s.to_string();
        let again = Selector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(&again, s);
        prop_assert_eq!(again.to_string(), text);
        Ok(())
    }

    proptest! {
        #[test]
        fn displayed_selectors_parse_back_equal(s in selector()) {
            check_round_trip(&s)?;
        }

        #[test]
        fn spaced_and_double_equals_text_parses_to_the_same_selector(
            s in selector(),
            spaces in proptest::collection::vec(" {0,2}|\t|\n", 1..40),
        ) {
            // Write every requirement again with `==` for `=` and spaces around every token.
            let mut next = spaces.iter().cycle();
            let mut sp = || next.next().expect("a cycle of a non-empty vec").as_str();
            let mut parts = Vec::new();
            for r in s.requirements() {
                parts.push(match r {
                    Requirement::Equals { key, value } => format!("{}{key}{}=={}{value}{}", sp(), sp(), sp(), sp()),
                    Requirement::NotEquals { key, value } => format!("{}{key}{}!={}{value}{}", sp(), sp(), sp(), sp()),
                    Requirement::In { key, values } | Requirement::NotIn { key, values } => {
                        let op = if matches!(r, Requirement::In { .. }) { "in" } else { "notin" };
                        let mut items = Vec::new();
                        for v in values {
                            items.push(format!("{}{v}{}", sp(), sp()));
                        }
                        format!("{}{key} {}{op} {}({}){}", sp(), sp(), sp(), items.join(","), sp())
                    }
                    Requirement::Exists { key } => format!("{}{key}{}", sp(), sp()),
                    Requirement::NotExists { key } => format!("{}!{}{key}{}", sp(), sp(), sp()),
                });
            }
            let spaced = parts.join(",");
            let again = Selector::parse(&spaced).map_err(|e| TestCaseError::fail(format!("{spaced:?}: {e}")))?;
            prop_assert_eq!(again, s);
        }

        #[test]
        fn matching_is_every_requirement_by_its_definition(s in selector(), l in any_labels()) {
            let expected = s.requirements().iter().all(|r| {
                let v = l.get(r.key());
                match r {
                    Requirement::Equals { value, .. } => v == Some(value),
                    Requirement::NotEquals { value, .. } => v.is_none() || v != Some(value),
                    Requirement::In { values, .. } => v.is_some_and(|v| values.contains(v)),
                    Requirement::NotIn { values, .. } => v.is_none_or(|v| !values.contains(v)),
                    Requirement::Exists { .. } => v.is_some(),
                    Requirement::NotExists { .. } => v.is_none(),
                }
            });
            prop_assert_eq!(s.matches(&l), expected);
        }

        #[test]
        fn any_text_parses_or_fails_without_panicking(
            text in prop_oneof![selector_like_text(), any::<String>()],
            l in any_labels(),
        ) {
            match Selector::parse(&text) {
                Ok(s) => {
                    check_round_trip(&s)?;
                    let _ = s.matches(&l);
                    let _ = s.matches(&Labels::default());
                }
                Err(e) => {
                    prop_assert!(e.position() <= text.len().min(MAX_SELECTOR_LEN));
                    prop_assert!(e.to_string().starts_with("selector \""));
                }
            }
        }

        #[test]
        fn labels_survive_json(l in any_labels()) {
            let json = serde_json::to_string(&l).expect("encodes");
            prop_assert_eq!(serde_json::from_str::<Labels>(&json).expect("decodes"), l);
        }

        #[test]
        fn generated_keys_and_values_are_valid(k in key(), v in value()) {
            prop_assert_eq!(check_key(&k), Ok(()));
            prop_assert_eq!(check_value(&v), Ok(()));
        }
    }
}

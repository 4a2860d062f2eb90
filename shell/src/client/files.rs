//! The files `jaque apply -f` and `jaque diff -f` read (issue 36): YAML (and JSON, which is read as the YAML it
//! is) documents of objects, with `defaults` blocks objects inherit by label and `${VAR}` from the environment.
//! Every error in every file is reported, each with the file, line and column it is at.
//!
//! ```yaml
//! defaults:                      # optional; in file order, later blocks over earlier ones
//!   - selector: env=prod         # optional: the objects whose own labels it picks (none: every object)
//!     interval: 30s
//!     labels: {team: web}        # labels are merged, the object's own win
//! objects:
//!   web-1:                       # the object id
//!     probe: {type: http, url: "https://${WEB_HOST:-example.com}/"}
//!     labels: {env: prod}
//! ```
//!
//! An object's fields are those of `PUT /api/objects/{id}` (probe, interval, timeout, labels, max_attempts,
//! retry_interval, recovery_attempts, flapping), checked as the server checks them (`ui::api::parse_def`).
//! `${VAR}` is the variable's value and an error when it is unset; `${VAR:-default}` is the default then; `$$` is
//! a `$`. Defaults of every file apply to the objects of every file (a directory is one configuration).
//!
//! YAML is read by `marked-yaml` (pure Rust, on `yaml-rust2`, maintained): every node keeps its line and column,
//! which is what an error must name. `serde_yaml` is archived; its maintained forks (`yaml_serde`,
//! `serde_yaml_ng`) keep no positions past the first error, and `serde-saphyr` deserializes into types without a
//! node tree to walk for every error at once.

use super::policy;
use jaque_core::labels::{Labels, Selector};
use marked_yaml::types::{MarkedMappingNode, Node};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The fields an object (and a defaults block) may have.
pub const FIELDS: [&str; 9] = [
    "probe",
    "interval",
    "timeout",
    "labels",
    "max_attempts",
    "retry_interval",
    "recovery_attempts",
    "flapping",
    "parents",
];

/// A document's keys, as its errors name them.
const TOP_KEYS: &str = "`defaults`, `objects`, `receivers`, `routes`, `windows` and `silences`";

/// Where something is in the files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pos {
    pub file: String,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// One error in the files.
#[derive(Debug, PartialEq, Eq)]
pub struct FileError {
    pub at: Option<Pos>,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            Some(at) => write!(f, "{at}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// An object as one file defines it, before defaults: its id, its own fields, where it is and where each field is.
type Defined = (String, Map<String, Value>, Pos, BTreeMap<String, Pos>);

/// An object as the files define it: the body of its `PUT`, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub id: String,
    pub body: Value,
    pub at: Pos,
}

/// Every `.yaml`, `.yml` and `.json` file of `paths` (a directory: those in it and below, sorted).
fn files(paths: &[PathBuf], errors: &mut Vec<FileError>) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let before = out.len();
            if let Err(e) = walk(p, &mut out) {
                errors.push(FileError { at: None, message: format!("{}: {e}", p.display()) });
            } else if out.len() == before {
                errors.push(FileError {
                    at: None,
                    message: format!("{}: no .yaml, .yml or .json file in it", p.display()),
                });
            }
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            errors.push(FileError { at: None, message: format!("{}: no such file or directory", p.display()) });
        }
    }
    out
}

/// What the files define: objects, and the notification policy (`policy`).
#[derive(Debug)]
pub struct Loaded {
    pub objects: Vec<Desired>,
    pub policy: policy::Desired,
}

/// Reads the objects and the policy `paths` define; `env` looks a variable up. `Err`: every error found, by file,
/// line and column (those of no place first).
pub fn load(paths: &[PathBuf], env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, Vec<FileError>> {
    let mut errors = Vec::new();
    let files = files(paths, &mut errors);
    let mut reader = Reader { env, errors, file: String::new() };
    let mut defaults: Vec<(Option<Selector>, Map<String, Value>)> = Vec::new();
    let mut objects: Vec<Defined> = Vec::new();
    let mut doc = Document {
        schemas: policy::Schemas::new(),
        policy: policy::Desired::default(),
        seen: BTreeMap::new(),
        now: crate::clock::now(),
    };
    for (i, path) in files.iter().enumerate() {
        reader.file = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                reader.fail(None, format!("{}: {e}", path.display()));
                continue;
            }
        };
        // Quoted scalars are strings whatever they hold (`"2"`, `"true"`); plain ones are read as YAML reads them.
        let options = marked_yaml::LoaderOptions::default().error_on_duplicate_keys(true).prevent_coercion(true);
        let root = match marked_yaml::parse_yaml_with_options(i, &text, options) {
            Ok(root) => root,
            Err(marked_yaml::LoadError::DuplicateKey(d)) => {
                let (first, again) = (pos(&reader.file, d.prev_key.span()), pos(&reader.file, d.key.span()));
                let what = format!("{:?} is defined again in the same mapping (first at {first})", d.key.as_str());
                reader.fail(Some(again), what);
                continue;
            }
            Err(e) => {
                reader.fail(None, format!("{}:{e}", path.display()));
                continue;
            }
        };
        reader.document(&root, &mut defaults, &mut objects, &mut doc);
    }
    let mut seen: BTreeMap<String, Pos> = BTreeMap::new();
    let mut out = Vec::new();
    // The text each definition is checked from, one buffer for all.
    let mut text = Vec::new();
    for (id, own, at, fields) in objects {
        if let Some(first) = seen.get(&id) {
            reader.fail(Some(at), format!("object {id} is defined again (first at {first})"));
            continue;
        }
        seen.insert(id.clone(), at.clone());
        if let Err(e) = jaque_core::ObjectId::new(id.as_str()) {
            reader.fail(Some(at), format!("object id {id:?}: {e}"));
            continue;
        }
        let own_labels = own.get("labels").and_then(Value::as_object).map(|m| {
            let pairs = m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect();
            Labels::new(pairs).unwrap_or_default()
        });
        let mut body = Map::new();
        for (selector, fields) in &defaults {
            if selector.as_ref().is_none_or(|s| s.matches(own_labels.as_ref().unwrap_or(&Labels::default()))) {
                merge(&mut body, fields.clone());
            }
        }
        merge(&mut body, own);
        let body = Value::Object(body);
        text.clear();
        serde_json::to_writer(&mut text, &body).expect("writing JSON into a Vec");
        match crate::ui::api::parse_def(&text) {
            Ok(_) => out.push(Desired { id, body, at }),
            Err(message) => {
                // The server's messages start with the field they are about, where they are about one; a body
                // that does not parse says so first, and where in the body (which is not the file).
                let message = message.strip_prefix("invalid body: ").unwrap_or(&message);
                let message = match message.rfind(" at line ") {
                    Some(i) if message[i..].contains(" column ") => &message[..i],
                    _ => message,
                };
                let field = message.split([':', ' ']).next().unwrap_or_default();
                let place = fields.get(field).cloned().unwrap_or(at);
                reader.fail(Some(place), format!("object {id}: {message}"));
            }
        }
    }
    if reader.errors.is_empty() {
        Ok(Loaded { objects: out, policy: doc.policy })
    } else {
        let mut errors = reader.errors;
        errors.sort_by(|a, b| {
            let key = |e: &FileError| e.at.as_ref().map(|p| (p.file.clone(), p.line, p.column));
            key(a).cmp(&key(b))
        });
        Err(errors)
    }
}

/// A YAML text's one document as `load` reads a definition's values (no variable set): what a test of the
/// files `get -o yaml` writes reads back.
#[cfg(test)]
pub fn read_value(text: &str) -> Result<Value, String> {
    let options = marked_yaml::LoaderOptions::default().error_on_duplicate_keys(true).prevent_coercion(true);
    let root = marked_yaml::parse_yaml_with_options(0, text, options).map_err(|e| e.to_string())?;
    let mut reader = Reader { env: &|_| None, errors: Vec::new(), file: "test".into() };
    reader.value(&root).ok_or_else(|| reader.errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
}

/// Fields over fields; labels merged key by key.
fn merge(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (k, v) in from {
        match (k.as_str(), into.get_mut(&k), v) {
            ("labels", Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
            (_, _, v) => {
                into.insert(k, v);
            }
        }
    }
}

pub(super) struct Reader<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    pub(super) errors: Vec<FileError>,
    pub(super) file: String,
}

/// What the documents of every file add to besides objects: the policy, with where each of its names was first
/// defined.
struct Document {
    schemas: policy::Schemas,
    policy: policy::Desired,
    seen: BTreeMap<(String, String), Pos>,
    now: jaque_core::Time,
}

/// `s` as an error may quote it: a URL's credentials (`https://user:password@host`) as `***`.
fn redacted(s: &str) -> String {
    jaque_core::secret::redact_urls_in(s).into_owned()
}

/// Where a node (or a key) starts.
pub(super) fn pos(file: &str, span: &marked_yaml::Span) -> Pos {
    let m = span.start();
    Pos { file: file.to_string(), line: m.map_or(0, |m| m.line()), column: m.map_or(0, |m| m.column()) }
}

impl Reader<'_> {
    pub(super) fn fail(&mut self, at: Option<Pos>, message: String) {
        self.errors.push(FileError { at, message });
    }

    /// One file's document: `defaults`, `objects` and the policy's parts.
    fn document(
        &mut self,
        root: &Node,
        defaults: &mut Vec<(Option<Selector>, Map<String, Value>)>,
        objects: &mut Vec<Defined>,
        doc: &mut Document,
    ) {
        let Some(top) = root.as_mapping() else {
            return self.fail(Some(pos(&self.file, root.span())), format!("a document is a mapping of {TOP_KEYS}"));
        };
        for (key, value) in top.iter() {
            let at = pos(&self.file, key.span());
            match key.as_str() {
                "objects" => match value.as_mapping() {
                    Some(m) => {
                        for (id, def) in m.iter() {
                            let at = pos(&self.file, id.span());
                            if let Some((fields, places)) = self.definition(def, false) {
                                objects.push((id.as_str().to_string(), fields, at, places));
                            }
                        }
                    }
                    None => self.fail(Some(at), "objects is a mapping of object ids to definitions".into()),
                },
                "defaults" => match value.as_sequence() {
                    Some(seq) => {
                        for block in seq.iter() {
                            let at = pos(&self.file, block.span());
                            let Some((mut fields, _)) = self.definition(block, true) else { continue };
                            let selector = match fields.remove("selector") {
                                None => None,
                                Some(Value::String(s)) => match Selector::parse(&s) {
                                    Ok(s) => Some(s),
                                    Err(e) => {
                                        self.fail(Some(at), format!("defaults: selector: {e}"));
                                        continue;
                                    }
                                },
                                Some(_) => {
                                    self.fail(Some(at), "defaults: selector is a label selector string".into());
                                    continue;
                                }
                            };
                            defaults.push((selector, fields));
                        }
                    }
                    None => self.fail(Some(at), "defaults is a list of blocks".into()),
                },
                part @ ("receivers" | "routes" | "windows" | "silences") => {
                    self.policy_part(&doc.schemas, part, value, &mut doc.policy, &mut doc.seen, doc.now)
                }
                other => self.fail(Some(at), format!("unknown key {other:?}: a document has {TOP_KEYS}")),
            }
        }
    }

    /// An object's definition (or a defaults block, which may have a `selector`): its fields as JSON, and where
    /// each is. `None` when it is not a mapping or a field is unknown (said).
    fn definition(&mut self, node: &Node, block: bool) -> Option<(Map<String, Value>, BTreeMap<String, Pos>)> {
        let file = self.file.clone();
        let Some(m): Option<&MarkedMappingNode> = node.as_mapping() else {
            self.fail(Some(pos(&file, node.span())), "a definition is a mapping of fields".into());
            return None;
        };
        let mut fields = Map::new();
        let mut places = BTreeMap::new();
        let mut ok = true;
        for (key, value) in m.iter() {
            let at = pos(&file, key.span());
            let name = key.as_str();
            let known = FIELDS.contains(&name) || block && name == "selector";
            if !known {
                let allowed = FIELDS.join(", ");
                self.fail(Some(at), format!("unknown field {name:?}; a definition has {allowed}"));
                ok = false;
                continue;
            }
            places.insert(name.to_string(), at);
            // A label value is a string: `rev: 2` and `canary: true` are the text written, as they look.
            let value = if name == "labels" { self.strings(value) } else { self.value(value) };
            match value {
                Some(v) => {
                    fields.insert(name.to_string(), v);
                }
                None => ok = false,
            }
        }
        ok.then_some((fields, places))
    }

    /// A node as JSON: a plain scalar as YAML's core schema reads it (null, true/false, a number, else a
    /// string), a quoted one as a string; `${VAR}` substituted in each.
    pub(super) fn value(&mut self, node: &Node) -> Option<Value> {
        match node {
            Node::Scalar(s) => {
                let text = self.substitute(s.as_str(), pos(&self.file, node.span()))?;
                if !s.may_coerce() {
                    return Some(Value::String(text));
                }
                Some(match text.as_str() {
                    "" | "~" | "null" | "Null" | "NULL" => Value::Null,
                    "true" | "True" | "TRUE" => Value::Bool(true),
                    "false" | "False" | "FALSE" => Value::Bool(false),
                    t => t
                        .parse::<i64>()
                        .map(Value::from)
                        .ok()
                        .or_else(|| t.parse::<f64>().ok().filter(|f| f.is_finite()).map(Value::from))
                        .unwrap_or(Value::String(text)),
                })
            }
            Node::Sequence(seq) => seq.iter().map(|n| self.value(n)).collect::<Option<Vec<_>>>().map(Value::Array),
            Node::Mapping(m) => {
                let mut out = Map::new();
                for (k, v) in m.iter() {
                    let v = self.value(v)?;
                    out.insert(k.as_str().to_string(), v);
                }
                Some(Value::Object(out))
            }
        }
    }

    /// A mapping of strings (labels): each scalar's text, `${VAR}` substituted; anything else as `value` reads it
    /// (for the server to refuse).
    fn strings(&mut self, node: &Node) -> Option<Value> {
        let Some(m) = node.as_mapping() else { return self.value(node) };
        let mut out = Map::new();
        for (k, v) in m.iter() {
            let v = match v.as_scalar() {
                Some(s) => Value::String(self.substitute(s.as_str(), pos(&self.file, v.span()))?),
                None => self.value(v)?,
            };
            out.insert(k.as_str().to_string(), v);
        }
        Some(Value::Object(out))
    }

    /// `${VAR}`, `${VAR:-default}`, `$$`. An error quotes the text with any URL's credentials as `***`.
    fn substitute(&mut self, s: &str, at: Pos) -> Option<String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(r) = after.strip_prefix('$') {
                out.push('$');
                rest = r;
            } else if let Some(inner) = after.strip_prefix('{') {
                let Some(end) = inner.find('}') else {
                    self.fail(Some(at), format!("{:?}: an unclosed ${{", redacted(s)));
                    return None;
                };
                let spec = &inner[..end];
                let (name, default) = match spec.split_once(":-") {
                    Some((n, d)) => (n, Some(d)),
                    None => (spec, None),
                };
                let valid = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !name.as_bytes()[0].is_ascii_digit();
                if !valid {
                    let what = format!("{:?}: ${{{spec}}} does not name an environment variable", redacted(s));
                    self.fail(Some(at), what);
                    return None;
                }
                match ((self.env)(name), default) {
                    (Some(v), _) => out.push_str(&v),
                    (None, Some(d)) => out.push_str(d),
                    (None, None) => {
                        self.fail(
                            Some(at),
                            format!("${{{name}}} is not set (write ${{{name}:-default}} for a default)"),
                        );
                        return None;
                    }
                }
                rest = &inner[end + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Some(out)
    }
}

/// The JSON Schema of the files (`jaque schema`; `docs/objects.schema.json` is a copy a test holds to it), made
/// from the API's own document, so a definition in a file is exactly the body of a put: editors that read it
/// complete and check the files (`# yaml-language-server: $schema=...` for YAML).
pub fn json_schema() -> Value {
    let doc = crate::ui::openapi::base();
    let text = doc["components"]["schemas"].to_string().replace("#/components/schemas/", "#/$defs/");
    let all: Map<String, Value> = serde_json::from_str(&text).unwrap_or_default();
    // Only the schemas a file's definition reaches.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/")) {
                    out.push(r.to_string());
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut defs = Map::new();
    let mut todo = vec!["Definition".to_string(), "ObjectId".to_string(), "PolicyName".to_string()];
    todo.extend(policy::PARTS.iter().map(|(_, schema)| schema.to_string()));
    while let Some(name) = todo.pop() {
        if defs.contains_key(&name) {
            continue;
        }
        if let Some(schema) = all.get(&name) {
            refs(schema, &mut todo);
            defs.insert(name, schema.clone());
        }
    }
    let mut block = defs.get("Definition").cloned().unwrap_or(Value::Null);
    if let Some(b) = block.as_object_mut() {
        b.remove("required");
        b.insert(
            "description".into(),
            Value::String(
                "Fields every object whose own labels the selector picks inherits (all objects without one); later \
                 blocks over earlier ones, an object's own fields over all, labels merged key by key."
                    .into(),
            ),
        );
        if let Some(props) = b.get_mut("properties").and_then(Value::as_object_mut) {
            props.insert(
                "selector".into(),
                serde_json::json!({"description": "A label selector (`env=prod,tier in (web,api)`).", "type": "string"}),
            );
        }
    }
    defs.insert("DefaultsBlock".into(), block);
    // A silence in a file has fixed times: a duration from now would start again at each apply.
    let mut silence = defs.remove("SilencePut").unwrap_or(Value::Null);
    if let Some(s) = silence.as_object_mut() {
        s.insert(
            "description".into(),
            Value::String(
                "A silence, its name the key: the objects its selector picks are not notified of problems from \
                 `starts_at` (RFC 3339 in UTC; default: when it is first applied) until `ends_at`, or for `duration` \
                 from `starts_at` (a file's times are fixed: a duration needs its start). `author` is who set it."
                    .into(),
            ),
        );
        s.insert(
            "oneOf".into(),
            serde_json::json!([{"required": ["ends_at"]}, {"required": ["starts_at", "duration"]}]),
        );
    }
    defs.insert("FileSilence".into(), silence);
    let named = |schema: &str| {
        serde_json::json!({
            "type": "object",
            "propertyNames": {"$ref": "#/$defs/PolicyName"},
            "additionalProperties": {"$ref": format!("#/$defs/{schema}")}
        })
    };
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "jaque objects and notification policy, as `jaque apply -f` and `jaque diff -f` read them",
        "description": "A file of objects: `objects` maps an object id to the body of its put; `defaults` blocks add fields by label. The notification policy beside them: `receivers`, `windows` and `silences` map a name to the body of its put (a name's part before its first '.' is the source that may prune it), `routes` is the whole ordered list (defined in one file; no file: the cluster's routes are left alone). Strings may hold ${VAR} and ${VAR:-default} from the environment.",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "defaults": {"type": "array", "items": {"$ref": "#/$defs/DefaultsBlock"}},
            "objects": {
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/ObjectId"},
                "additionalProperties": {"$ref": "#/$defs/Definition"}
            },
            "receivers": named("ReceiverBody"),
            "routes": {
                "description": "Tried in order: the cluster's whole list is replaced by this one.",
                "type": "array",
                "maxItems": jaque_core::policy::MAX_ROUTES,
                "items": {"$ref": "#/$defs/Route"}
            },
            "windows": named("WindowBody"),
            "silences": named("FileSilence")
        },
        "$defs": defs
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn env(name: &str) -> Option<String> {
        (name == "HOST").then(|| "db.example.com".to_string())
    }

    #[test]
    fn objects_take_defaults_by_label_and_variables_from_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "a.yaml",
            "defaults:\n  - interval: 1m\n  - selector: env=prod\n    interval: 30s\n    labels: {team: web}\nobjects:\n  web-1:\n    probe: {type: tcp, addr: \"${HOST}:443\"}\n    labels: {env: prod, team: api}\n  web-2:\n    probe: {type: tcp, addr: \"${NOPE:-localhost}:80\"}\n    max_attempts: 5\n",
        );
        write(
            dir.path(),
            "b.json",
            r#"{"objects": {"db-1": {"probe": {"type": "tcp", "addr": "db:5432"}, "flapping": false}}}"#,
        );
        let got = load(&[dir.path().to_path_buf()], &env).unwrap().objects;
        let by_id: BTreeMap<&str, &Value> = got.iter().map(|d| (d.id.as_str(), &d.body)).collect();
        assert_eq!(
            by_id["web-1"],
            &serde_json::json!({"probe": {"type": "tcp", "addr": "db.example.com:443"}, "interval": "30s", "labels": {"env": "prod", "team": "api"}})
        );
        assert_eq!(
            by_id["web-2"],
            &serde_json::json!({"probe": {"type": "tcp", "addr": "localhost:80"}, "interval": "1m", "max_attempts": 5})
        );
        assert_eq!(by_id["db-1"]["flapping"], false);
        assert_eq!(by_id["db-1"]["interval"], "1m", "defaults of one file apply to the objects of every file");
        assert_eq!(got[0].at.line, 7);
    }

    #[test]
    fn every_error_of_every_file_is_reported_with_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(
            dir.path(),
            "a.yaml",
            "objects:\n  ok-1:\n    probe: {type: tcp, addr: \"h:1\"}\n  bad-interval:\n    probe: {type: tcp, addr: \"h:1\"}\n    interval: soon\n  unknown:\n    probe: {type: tcp, addr: \"h:1\"}\n    intervall: 1m\n  unset:\n    probe: {type: tcp, addr: \"${NOT_SET}:1\"}\n",
        );
        let b = write(dir.path(), "b.yaml", "objects:\n  ok-1:\n    probe: {type: tcp, addr: \"h:2\"}\nextra: 1\n");
        let c = write(dir.path(), "c.yaml", "objects: [\n");
        let d = write(
            dir.path(),
            "d.yaml",
            "objects:\n  twice:\n    probe: {type: tcp, addr: \"h:1\"}\n  twice:\n    probe: {type: tcp, addr: \"h:1\"}\n",
        );
        let e = write(dir.path(), "e.yaml", "objects:\n  \"not an id\":\n    probe: {type: tcp, addr: \"h:1\"}\n");
        let errors = load(&[a, b, c, d, e], &env).unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let has = |needle: &str| text.iter().any(|t| t.contains(needle));
        assert!(has("a.yaml:6:5: object bad-interval: interval"), "{text:#?}");
        assert!(has("a.yaml:9:5: unknown field \"intervall\""), "{text:#?}");
        assert!(has("a.yaml:11:30: ${NOT_SET} is not set"), "{text:#?}");
        assert!(has("b.yaml:4:1: unknown key \"extra\""), "{text:#?}");
        assert!(has("b.yaml:2:3: object ok-1 is defined again (first at"), "{text:#?}");
        assert!(has("c.yaml:"), "{text:#?}");
        assert!(has("d.yaml:4:3: \"twice\" is defined again in the same mapping (first at "), "{text:#?}");
        assert!(has("e.yaml:2:3: object id \"not an id\""), "{text:#?}");
        assert_eq!(errors.len(), 8, "{text:#?}");
        let places: Vec<(usize, usize)> =
            errors.iter().filter_map(|e| e.at.as_ref().map(|p| (p.line, p.column))).collect();
        assert_eq!(places[..4], [(6, 5), (9, 5), (11, 30), (2, 3)], "by file, line and column: {text:#?}");
    }

    #[test]
    fn quoted_scalars_are_strings_and_label_values_the_text_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "a.yaml",
            "objects:\n  x:\n    probe: {type: tcp, addr: \"h:1\"}\n    max_attempts: 2\n    flapping: false\n    labels: {rev: 2, canary: true, quoted: \"07\"}\n",
        );
        let got = load(&[p], &env).unwrap().objects;
        assert_eq!(got[0].body["max_attempts"], 2);
        assert_eq!(got[0].body["flapping"], false);
        assert_eq!(got[0].body["labels"], serde_json::json!({"rev": "2", "canary": "true", "quoted": "07"}));
        let q = write(
            dir.path(),
            "b.yaml",
            "objects:\n  y:\n    probe: {type: tcp, addr: \"h:1\"}\n    max_attempts: \"2\"\n",
        );
        let e = load(&[q], &env).unwrap_err();
        assert!(e[0].to_string().contains("b.yaml:4:5: object y: max_attempts"), "{}", e[0]);
        assert!(!e[0].to_string().contains("at line 1"), "no place in the body, which is not the file: {}", e[0]);
    }

    /// `docs/objects.schema.json` is what `jaque schema` prints (write it again with
    /// `cargo run -p jaque -- schema > docs/objects.schema.json`), and its definition is the API's put body.
    #[test]
    fn the_published_schema_is_the_one_this_build_makes() {
        let published: Value = serde_json::from_str(include_str!("../../../docs/objects.schema.json"))
            .expect("docs/objects.schema.json is JSON");
        assert_eq!(published, json_schema(), "docs/objects.schema.json is stale: write it again with `jaque schema`");
        let schema = json_schema();
        let mut fields: Vec<&str> =
            schema["$defs"]["Definition"]["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        fields.sort();
        let mut known = FIELDS.to_vec();
        known.sort();
        assert_eq!(fields, known, "the files' fields are the put's");
    }

    #[test]
    fn substitution_reads_defaults_dollars_and_refuses_what_names_no_variable() {
        let mut r = Reader { env: &env, errors: Vec::new(), file: "f".into() };
        let at = Pos { file: "f".into(), line: 1, column: 1 };
        assert_eq!(r.substitute("${HOST}/${X:-a:b}$$1$", at.clone()).as_deref(), Some("db.example.com/a:b$1$"));
        assert_eq!(r.substitute("${1X}", at.clone()), None);
        assert_eq!(r.substitute("${HOST", at.clone()), None);
        assert_eq!(r.substitute("https://u:s3cret@h/${oops", at), None);
        assert_eq!(r.errors.len(), 3);
        assert!(!r.errors[2].to_string().contains("s3cret"), "{}", r.errors[2]);
    }
}

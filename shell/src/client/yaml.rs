//! `jaque get objects|object -o yaml`: the objects as a file `jaque apply -f` reads back (as `kubectl get -o yaml`
//! is one `kubectl apply -f` takes): `objects:` mapping each id to its definition as the server shows it (the
//! fields a file may have: one a newer server shows would make this build's apply refuse the file). The
//! state is not in it (it is in `-o json` and the tables): a file holds what is defined, not what was seen.
//!
//! Written by `yaml-rust2`'s emitter, the crate `marked-yaml` reads the files with (no other YAML crate in the
//! build). It quotes a string when a plain scalar would read as something else, and its test of "looks like a
//! number" is Rust's own `i64`/`f64` parse, the very rule `files` reads plain scalars by, so what it writes reads
//! back as the same value. Strings of several lines are written double-quoted with `\n` escapes rather than as
//! `|` blocks: a block loses trailing blank lines and leading spaces unless it carries indicators the emitter
//! does not write.
//!
//! Applied back unchanged (with the source it was applied with, if any), such a file writes nothing: `apply`
//! counts an object the server already shows exactly as the files define it as unchanged.

use super::files::FIELDS;
use serde_json::Value;
use yaml_rust2::yaml::{Hash, Yaml};
use yaml_rust2::YamlEmitter;

/// The file for `objects` (as `GET /api/objects` lists them): a comment naming any whose secrets the server shows
/// as `***` (applied after an edit, the `***` would be written), then `objects:`.
pub fn objects_file(objects: &[Value]) -> String {
    let mut defs = Hash::new();
    let mut redacted = Vec::new();
    for o in objects {
        let id = o["id"].as_str().unwrap_or_default();
        let def = &o["definition"];
        if def["probe"]["url"].as_str().is_some_and(|u| u.contains("://***@")) {
            redacted.push(id);
        }
        // The fields a file may have, in the order the files' docs write them (probe first); one a newer server
        // shows and this build cannot write would make apply refuse the file.
        let fields: Hash =
            FIELDS.iter().filter_map(|f| Some((Yaml::String(f.to_string()), to_yaml(def.get(*f)?)))).collect();
        defs.insert(Yaml::String(id.to_string()), Yaml::Hash(fields));
    }
    let mut root = Hash::new();
    root.insert(Yaml::String("objects".into()), Yaml::Hash(defs));
    let mut out = String::new();
    for id in redacted {
        out.push_str(&format!(
            "# {id}: the server shows the credentials of its probe's url as ***: write them (e.g. as ${{VAR}}) \
             before you change this object and apply it\n"
        ));
    }
    out.push_str(&emit(&Yaml::Hash(root)));
    out
}

/// A YAML document of `v`, ending with a line break.
pub fn emit(v: &Yaml) -> String {
    let mut out = String::new();
    // The emitter fails only when the `fmt::Write` it writes to does, which a `String` never does.
    let _ = YamlEmitter::new(&mut out).dump(v);
    out.push('\n');
    out
}

/// `s` as a file must say it for `apply` to read `s`: a `$` before a `$` or a `{` doubled (`files` reads `$$` as
/// `$` and `${...}` as a variable); any other `$` is read as it is, and left so.
fn dollars_kept(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '$' && matches!(chars.peek(), Some('$' | '{')) {
            out.push('$');
        }
    }
    out
}

/// A JSON value as YAML's, for `apply` to read back: keys in the order the JSON has them, numbers as written,
/// strings with their `$` kept (`dollars_kept`; keys are not substituted).
pub fn to_yaml(v: &Value) -> Yaml {
    match v {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(dollars_kept(s)),
        Value::Array(a) => Yaml::Array(a.iter().map(to_yaml).collect()),
        Value::Object(m) => Yaml::Hash(m.iter().map(|(k, v)| (Yaml::String(k.clone()), to_yaml(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::files;
    use super::*;
    use serde_json::json;

    /// `value` written as YAML and read back as `apply -f` reads a file's values.
    fn round_trip(value: &Value) -> Value {
        let text = emit(&to_yaml(value));
        files::read_value(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    #[test]
    fn strings_that_would_read_as_something_else_are_quoted_and_read_back_as_strings() {
        let tricky = [
            "2",
            "07",
            "-1",
            "1.5",
            "1e5",
            "1E5",
            ".5",
            "5.",
            "+3",
            "inf",
            "-inf",
            "NaN",
            "0x1F",
            "true",
            "False",
            "TRUE",
            "null",
            "Null",
            "~",
            "yes",
            "no",
            "on",
            "off",
            "",
            " ",
            " padded",
            "trailing ",
            "a: b",
            "a #b",
            "#c",
            "- item",
            "[x]",
            "{x}",
            "*alias",
            "&anchor",
            "!tag",
            "%d",
            "@at",
            "`tick`",
            "'single'",
            "\"double\"",
            "back\\slash",
            "tab\there",
            "---",
            "...",
            "? q",
            "| pipe",
            "> fold",
            "a,b",
            "$",
            "$HOME",
            "${HOME}",
            "$$",
            "a$${b}$",
            "${",
        ];
        for s in tricky {
            let v = json!({"s": s});
            assert_eq!(round_trip(&v), v, "{s:?} as {:?}", emit(&to_yaml(&v)));
        }
        // Plain where nothing could mistake it: what an operator reads in a file.
        let plain = emit(&to_yaml(&json!({"addr": "db.example.com:5432", "url": "https://h/x?a=b", "i": "30s"})));
        assert_eq!(plain, "---\naddr: \"db.example.com:5432\"\ni: 30s\nurl: \"https://h/x?a=b\"\n");
    }

    #[test]
    fn lines_empty_strings_numbers_and_labels_with_slashes_read_back_as_they_were() {
        let v = json!({
            "output": "CRITICAL - down\nsecond line\n\n  indented\n",
            "one": "no trailing\nbreak",
            "crlf": "a\r\nb",
            "empty": "",
            "unicode": "caf\u{e9} \u{2713} \u{1F600}",
            "numbers": [0, -7, 3, 1.5, 1e300, 18446744073709551615u64],
            "flags": [true, false, null],
            "nested": {"empty_map": {}, "empty_list": []},
            "labels": {"jaque/source": "git", "jaque/applied": "00000000000012e4", "app.kubernetes.io/name": "web"},
        });
        let text = emit(&to_yaml(&v));
        assert!(text.contains("jaque/source: git\n"), "a / needs no quotes in a key or a value: {text}");
        assert!(text.contains("jaque/applied: \"00000000000012e4\""), "a hash that reads as a number: {text}");
        let mut back = round_trip(&v);
        // u64::MAX is not an i64: written exactly, read back as the nearest f64 (as a file's own number is).
        assert_eq!(back["numbers"][5].as_f64(), Some(18446744073709551615u64 as f64));
        back["numbers"][5] = v["numbers"][5].clone();
        assert_eq!(back, v, "{text}");
    }

    #[test]
    fn the_file_is_what_apply_reads_with_a_note_on_redacted_credentials() {
        let listed = json!([
            {"id": "web-1", "state": "ok", "definition": {"probe": {"type": "http", "url": "https://***@h/"}, "interval": "30s", "labels": {}}},
            {"id": "db-1", "state": "critical", "definition": {"probe": {"type": "tcp", "addr": "db:5432"}, "interval": "1m", "labels": {"env": "prod"}}},
        ]);
        let text = objects_file(listed.as_array().unwrap());
        assert!(text.starts_with("# web-1: the server shows the credentials"), "{text}");
        assert!(!text.contains("critical"), "no state: {text}");
        let read = files::read_value(&text).unwrap();
        assert_eq!(read["objects"]["db-1"], listed[1]["definition"]);
        assert_eq!(read["objects"]["web-1"], listed[0]["definition"]);
        // A field this build's files cannot have (a newer server's) is left out: apply would refuse the file.
        let mut newer = listed[1].clone();
        newer["definition"]["dependencies"] = json!(["web-1"]);
        let read = files::read_value(&objects_file(&[newer])).unwrap();
        assert_eq!(read["objects"]["db-1"], listed[1]["definition"]);
    }
}

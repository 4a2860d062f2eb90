//! Label selectors (`jaque_core::labels::Selector`) on arbitrary bytes.
//!
//! Checked: any UTF-8 text parses or fails without panicking; a failure's position lies within the text and on
//! a character boundary, and its message quotes the selector; whatever parses displays as a canonical text that
//! parses back to an equal selector and displays the same again; matching never panics and is every
//! requirement's match, for a few fixed sets of labels.

use jaque_core::labels::{Labels, Selector, MAX_SELECTOR_LEN};
use std::collections::BTreeMap;
use std::sync::OnceLock;

fn fixed_labels() -> &'static [Labels] {
    static LABELS: OnceLock<Vec<Labels>> = OnceLock::new();
    LABELS.get_or_init(|| {
        let sets: &[&[(&str, &str)]] = &[
            &[],
            &[("a", "")],
            &[("a", "b"), ("env", "prod"), ("in", "notin"), ("example.com/team", "ops"), ("k", "v")],
            &[("a", "x"), ("b", ""), ("env", "dev"), ("tier", "web")],
        ];
        sets.iter()
            .map(|pairs| {
                let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                Labels::new(map).expect("fixed labels are valid")
            })
            .collect()
    })
}

pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Selector::parse(text) {
        Ok(selector) => {
            let shown = selector.to_string();
            let again = Selector::parse(&shown)
                .unwrap_or_else(|e| panic!("{text:?} parses, displays as {shown:?}, which does not parse: {e}"));
            assert_eq!(again, selector, "{text:?}: parse(display(s)) != s (display {shown:?})");
            assert_eq!(again.to_string(), shown, "{text:?}: display is not stable");
            assert_eq!(selector.is_empty(), shown.is_empty());
            for labels in fixed_labels() {
                let all = selector.requirements().iter().all(|r| r.matches(labels));
                assert_eq!(selector.matches(labels), all, "{shown:?} on {labels:?}");
                assert_eq!(again.matches(labels), all, "{shown:?} reparsed on {labels:?}");
            }
        }
        Err(e) => {
            let at = e.position();
            assert!(at <= text.len().min(MAX_SELECTOR_LEN), "{text:?}: position {at} is past the text: {e}");
            assert!(text.len() > MAX_SELECTOR_LEN || text.is_char_boundary(at), "{text:?}: position {at}: {e}");
            assert!(e.to_string().starts_with("selector \""), "{e}");
        }
    }
}

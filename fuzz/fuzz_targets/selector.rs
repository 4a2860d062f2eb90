//! Label selectors (`jaque_core::labels::Selector`) on arbitrary bytes: the properties are
//! `jaque_fuzz::checks::selector`'s.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| jaque_fuzz::checks::selector::check(data));

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| jaque_fuzz::checks::roles::check(data));

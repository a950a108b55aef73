#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lanes_fuzz_entry::hot_record::fuzz_one(data));

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lanes_fuzz_entry::lane_messages::fuzz_one(data));

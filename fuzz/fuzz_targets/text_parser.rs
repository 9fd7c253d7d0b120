//! Fuzzes the text parser (classic and meta commands) with arbitrary byte
//! streams; the invariants are listed in `common/text.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/text.rs"]
mod text;

fuzz_target!(|data: &[u8]| text::check_stream(data));

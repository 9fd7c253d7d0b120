//! Fuzzes the meta commands: the first byte picks `mg ms md ma me mn`, the
//! rest of the input follows it as key, flags, data and further requests,
//! so the fuzzer spends its time in the meta flag and key parsing rather
//! than in finding the command names. Same invariants as `text_parser`
//! (`common/text.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/text.rs"]
mod text;

const COMMANDS: [&[u8]; 6] = [b"mg ", b"ms ", b"md ", b"ma ", b"me ", b"mn"];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let mut stream = COMMANDS[usize::from(pick) % COMMANDS.len()].to_vec();
    stream.extend_from_slice(rest);
    text::check_stream(&stream);
});

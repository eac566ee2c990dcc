//! Criterion benches live in the `[[bench]]` targets beside this file.

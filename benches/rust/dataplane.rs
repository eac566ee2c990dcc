//! Data-plane throughput between two processes over loopback TCP:
//! this binary starts a copy of itself as the receiving worker, then sends
//! `Event::Data` batches to it through [`DataPlane`] (Arrow IPC encoding,
//! per-channel credits, authenticated connection) and reports GB/s and
//! rows/s (column bytes, not counting framing) as the receiver measured them (first batch to EndOfPartition,
//! every batch decoded into a `RecordBatch`).
//!
//!     cargo bench -p eddyline-benches --bench dataplane

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use eddyline_core::event::Event;
use eddyline_core::net::auth::Secret;
use eddyline_core::net::data::DataPlane;

const ROLE: &str = "EDDYLINE_DATAPLANE_ROLE";

fn batch(rows: usize) -> RecordBatch {
    let cols: Vec<(String, ArrayRef)> = (0..4)
        .map(|c| {
            let a: ArrayRef = Arc::new(Int64Array::from_iter_values(
                (0..rows as i64).map(|i| i * 7 + c),
            ));
            (format!("c{c}"), a)
        })
        .collect();
    RecordBatch::try_from_iter(cols).expect("invariant: equal lengths")
}

fn receiver() {
    let secret = Secret::from_hex(&std::env::var("EDDYLINE_DATAPLANE_SECRET").expect("secret"))
        .expect("hex secret");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut plane = DataPlane::new(1, 1, secret, listener, 8);
    let (rx, credit) = plane.inbound(0, 0);
    plane.start(&[]).expect("start");
    println!("{addr}");
    std::io::stdout().flush().expect("flush");
    let mut rows = 0usize;
    let mut bytes = 0usize;
    let mut start = None;
    loop {
        let (ev, _) = rx.queue().recv().expect("sender alive");
        credit.consumed();
        match ev {
            Event::Data(b) => {
                start.get_or_insert_with(Instant::now);
                rows += b.num_rows();
                // Logical bytes: the decoded columns share the frame's buffer.
                bytes += b.num_rows() * b.num_columns() * 8;
            }
            Event::EndOfPartition => break,
            _ => {}
        }
    }
    let secs = start.map(|s| s.elapsed().as_secs_f64()).unwrap_or(0.0);
    println!("{rows} {bytes} {secs}");
}

fn run(rows_per_batch: usize, batches: usize) {
    let secret = Secret::generate().expect("secret");
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .env(ROLE, "receiver")
        .env("EDDYLINE_DATAPLANE_SECRET", secret.to_hex())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the receiver");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("receiver address");
    let peer: SocketAddr = line.trim().parse().expect("address");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let me = listener.local_addr().expect("addr");
    let mut plane = DataPlane::new(0, 1, secret, listener, 8);
    let tx = plane.outbound(1, 0);
    plane.start(&[me, peer]).expect("connect");
    let b = batch(rows_per_batch);
    for _ in 0..batches {
        tx.send(Event::Data(b.clone())).expect("send");
    }
    tx.send(Event::EndOfPartition).expect("send");
    line.clear();
    out.read_line(&mut line).expect("receiver result");
    let _ = child.wait();
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse().expect("number"))
        .collect();
    let (rows, bytes, secs) = (f[0], f[1], f[2]);
    println!(
        "dataplane/{rows_per_batch}-row batches of 4 int64 columns: {:.2} GB/s, {:.1} M rows/s, \
         {:.0} batches/s ({} batches in {:.3} s)",
        bytes / secs / 1e9,
        rows / secs / 1e6,
        batches as f64 / secs,
        batches,
        secs
    );
}

fn main() {
    if std::env::var(ROLE).as_deref() == Ok("receiver") {
        receiver();
        return;
    }
    // `cargo test --benches` runs benches once as a smoke test: keep it short.
    let quick = !std::env::args().any(|a| a == "--bench");
    let scale = if quick { 20 } else { 1 };
    run(8192, 8000 / scale);
    run(1024, 40_000 / scale);
    run(64, 100_000 / scale);
}

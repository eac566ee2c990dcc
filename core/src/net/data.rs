//! The data plane between worker processes: every channel whose producer
//! and consumer subtasks live in different workers is carried over one TCP
//! connection per (sending worker, receiving worker) pair, as frames of
//! Arrow IPC (batches) and encoded control events, in channel order.
//!
//! Flow control is credit based, per channel: a sender starts with
//! `capacity` credits, spends one per event and blocks at zero; the
//! receiver returns credits as its task takes events off the channel. The
//! receiving side therefore never blocks reading the socket (its queue can
//! never hold more than `capacity` events per channel), so one channel held
//! back by barrier alignment never stalls the other channels sharing the
//! connection, and backpressure crosses processes exactly like a full local
//! channel.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};
use parking_lot::{Condvar, Mutex};

use crate::channel::{event_bytes, EventReceiver, Item, PrioritySlot};
use crate::error::{Error, Result};
use crate::event::{Barrier, Event};
use crate::net::auth::{client_handshake, server_handshake, Secret};
use crate::net::wire::{
    decode_control_event, encode_control_event, read_frame, write_frame, BatchDecoder,
    BatchEncoder, Dec, Enc,
};

const TAG_PEER_HELLO: u8 = 1;
const TAG_DATA: u8 = 2;
const TAG_DATA_FRESH: u8 = 3;
const TAG_EVENT: u8 = 4;
const TAG_CREDIT: u8 = 5;
/// An unaligned barrier overtaking the channel's queue (FLIP-76).
const TAG_PRIORITY: u8 = 6;

/// How long a worker keeps retrying to reach a peer's data port.
const CONNECT_PATIENCE: Duration = Duration::from_secs(60);
/// How long a peer's data port may refuse connections (it listens before
/// the job starts, so only a transient refusal is worth a retry).
const REFUSED_PATIENCE: Duration = Duration::from_secs(3);

fn lost(peer: usize, why: &str) -> Error {
    Error::runtime(format!(
        "the data connection to worker {peer} was lost: {why}"
    ))
}

/// The sending end of one (this worker -> peer) connection.
struct OutLink {
    peer: usize,
    writer: Mutex<Option<TcpStream>>,
    /// Per channel; an overtaking barrier's marker may overdraw it.
    credits: Mutex<HashMap<u32, i64>>,
    ready: Condvar,
    /// Set once `writer` holds the connection (read without its lock).
    connected: AtomicBool,
    broken: AtomicBool,
}

impl OutLink {
    fn fail(&self) {
        self.broken.store(true, Ordering::SeqCst);
        let _g = self.credits.lock();
        self.ready.notify_all();
    }
}

/// Writes one remote channel. Used by exactly one task.
pub struct RemoteSender {
    channel: u32,
    link: Arc<OutLink>,
    encoder: Mutex<BatchEncoder>,
}

impl RemoteSender {
    /// Sends `event`, blocking while the channel has no credit.
    pub fn send(&self, event: Event) -> Result<()> {
        {
            let mut credits = self.link.credits.lock();
            loop {
                if self.link.broken.load(Ordering::SeqCst) {
                    return Err(Error::Cancelled);
                }
                let c = credits.entry(self.channel).or_insert(0);
                if *c > 0 && self.link.connected.load(Ordering::Acquire) {
                    *c -= 1;
                    break;
                }
                self.link.ready.wait(&mut credits);
            }
        }
        let (tag, payload) = match &event {
            Event::Data(batch) => {
                let (fresh, bytes) = self.encoder.lock().encode(batch)?;
                (if fresh { TAG_DATA_FRESH } else { TAG_DATA }, bytes)
            }
            other => (TAG_EVENT, encode_control_event(other)),
        };
        let mut w = self.link.writer.lock();
        let Some(stream) = w.as_mut() else {
            return Err(Error::Cancelled);
        };
        if let Err(e) = write_frame(stream, tag, self.channel, &[&payload]) {
            drop(w);
            self.link.fail();
            return Err(lost(self.link.peer, &e.to_string()));
        }
        Ok(())
    }

    /// Sends an unaligned barrier ahead of the data in flight (FLIP-76,
    /// as [`crate::channel::EventSender::send_overtaking`] locally): its
    /// in-band marker, spending a credit without waiting for one (the
    /// consumer returns it like any event's), then a priority frame the
    /// receiver puts in the channel's priority slot. The sender keeps no
    /// buffer of its own, so what the barrier overtakes is all in the
    /// receiver's queue.
    pub fn send_overtaking(&self, barrier: Barrier) -> Result<()> {
        {
            let mut credits = self.link.credits.lock();
            if self.link.broken.load(Ordering::SeqCst) {
                return Err(Error::Cancelled);
            }
            *credits.entry(self.channel).or_insert(0) -= 1;
        }
        let payload = encode_control_event(&Event::Barrier(barrier));
        let mut w = self.link.writer.lock();
        let Some(stream) = w.as_mut() else {
            return Err(Error::Cancelled);
        };
        let written = write_frame(stream, TAG_EVENT, self.channel, &[&payload])
            .and_then(|()| write_frame(stream, TAG_PRIORITY, self.channel, &[&payload]));
        if let Err(e) = written {
            drop(w);
            self.link.fail();
            return Err(lost(self.link.peer, &e.to_string()));
        }
        Ok(())
    }
}

/// Where a remote input channel's reader thread delivers: its queue, and
/// the priority slot of barriers overtaking it.
type InChannel = (Sender<Item>, Arc<PrioritySlot>);

/// The receiving end of one (peer -> this worker) connection.
struct InLink {
    writer: Mutex<Option<TcpStream>>,
    channels: Mutex<HashMap<u32, InChannel>>,
}

/// Returns credits of one remote input channel to its sender as the task
/// consumes events.
pub struct CreditReturn {
    channel: u32,
    link: Arc<InLink>,
    pending: AtomicU32,
    batch: u32,
}

impl CreditReturn {
    /// One event was taken off the channel.
    #[inline]
    pub fn consumed(&self) {
        let n = self.pending.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.batch {
            let mut w = self.link.writer.lock();
            if let Some(stream) = w.as_mut() {
                self.pending.store(0, Ordering::Relaxed);
                if write_frame(stream, TAG_CREDIT, self.channel, &[&n.to_le_bytes()]).is_err() {
                    // A write fails only on a broken connection (maybe after
                    // half a frame): close it, so that `read_data` ends and
                    // the task learns that its producer is gone (the
                    // driver reports the peer's loss as the cause).
                    // Closing a dead socket may fail too; nothing to add.
                    let _ = stream.shutdown(Shutdown::Both);
                    *w = None;
                }
            }
        }
    }
}

/// The remote channels of one worker in one attempt.
pub struct DataPlane {
    me: usize,
    attempt: u64,
    secret: Secret,
    capacity: u32,
    listener: Option<TcpListener>,
    out: HashMap<usize, Arc<OutLink>>,
    inb: HashMap<usize, Arc<InLink>>,
    shutdown: Arc<AtomicBool>,
    local_addr: Option<SocketAddr>,
}

impl DataPlane {
    /// A plane for worker `me` of `attempt`, accepting peers on `listener`.
    pub fn new(
        me: usize,
        attempt: u64,
        secret: Secret,
        listener: TcpListener,
        capacity: usize,
    ) -> DataPlane {
        let local_addr = listener.local_addr().ok();
        DataPlane {
            me,
            attempt,
            secret,
            capacity: capacity.max(1) as u32,
            listener: Some(listener),
            out: HashMap::new(),
            inb: HashMap::new(),
            shutdown: Arc::new(AtomicBool::new(false)),
            local_addr,
        }
    }

    /// The sender of channel `channel` to worker `peer`.
    pub fn outbound(&mut self, peer: usize, channel: u32) -> RemoteSender {
        let link = self
            .out
            .entry(peer)
            .or_insert_with(|| {
                Arc::new(OutLink {
                    peer,
                    writer: Mutex::new(None),
                    credits: Mutex::new(HashMap::new()),
                    ready: Condvar::new(),
                    connected: AtomicBool::new(false),
                    broken: AtomicBool::new(false),
                })
            })
            .clone();
        link.credits
            .lock()
            .insert(channel, i64::from(self.capacity));
        RemoteSender {
            channel,
            link,
            encoder: Mutex::new(BatchEncoder::default()),
        }
    }

    /// The receiving end of channel `channel` from worker `peer`.
    pub fn inbound(&mut self, peer: usize, channel: u32) -> (EventReceiver, CreditReturn) {
        let link = self
            .inb
            .entry(peer)
            .or_insert_with(|| {
                Arc::new(InLink {
                    writer: Mutex::new(None),
                    channels: Mutex::new(HashMap::new()),
                })
            })
            .clone();
        // Unbounded, but never holds more than `capacity` events: the
        // sender spends a credit per event.
        let (tx, rx) = unbounded();
        let priority = Arc::new(PrioritySlot::default());
        link.channels.lock().insert(channel, (tx, priority.clone()));
        (
            EventReceiver::ungated_with(rx, priority),
            CreditReturn {
                channel,
                link,
                pending: AtomicU32::new(0),
                batch: (self.capacity / 2).max(1),
            },
        )
    }

    /// Connects to the peers this worker sends to (their listeners are
    /// bound before the driver hands out addresses) and starts accepting
    /// the peers that send to it.
    pub fn start(&mut self, addrs: &[SocketAddr]) -> Result<()> {
        let expected: Vec<usize> = self.inb.keys().copied().collect();
        if let Some(listener) = self.listener.take() {
            let inb = self.inb.clone();
            let secret = self.secret.clone();
            let attempt = self.attempt;
            let shutdown = self.shutdown.clone();
            std::thread::Builder::new()
                .name("eddyline-accept".into())
                .spawn(move || accept_peers(listener, inb, expected, secret, attempt, shutdown))
                .map_err(|e| Error::runtime(format!("cannot start a thread: {e}")))?;
        }
        for (&peer, link) in &self.out {
            let addr = addrs
                .get(peer)
                .ok_or_else(|| Error::runtime(format!("no data address for worker {peer}")))?;
            let mut stream = dial(*addr, peer)?;
            client_handshake(&mut stream, &self.secret)?;
            let mut hello = Enc::default();
            hello.u32(self.me as u32).u64(self.attempt);
            write_frame(&mut stream, TAG_PEER_HELLO, 0, &[&hello.0])
                .map_err(|e| lost(peer, &e.to_string()))?;
            // Latency only (frames are written whole): a socket without it
            // still carries every frame.
            let _ = stream.set_nodelay(true);
            let reader = stream.try_clone().map_err(|e| lost(peer, &e.to_string()))?;
            *link.writer.lock() = Some(stream);
            link.connected.store(true, Ordering::Release);
            {
                let _g = link.credits.lock();
                link.ready.notify_all();
            }
            let l = link.clone();
            std::thread::Builder::new()
                .name(format!("eddyline-credits-{peer}"))
                .spawn(move || read_credits(reader, l))
                .map_err(|e| Error::runtime(format!("cannot start a thread: {e}")))?;
        }
        Ok(())
    }

    /// Stops everything: blocked senders return, sockets close.
    pub fn shutdown(&self) {
        if self.shutdown.swap(true, Ordering::SeqCst) {
            return;
        }
        // Best effort throughout: the attempt is over, and a socket that
        // cannot be shut down is already closed or broken (dropping it
        // closes it anyway); nothing waits for these results.
        for link in self.out.values() {
            link.fail();
            if let Some(s) = link.writer.lock().as_ref() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        for link in self.inb.values() {
            if let Some(s) = link.writer.lock().as_ref() {
                let _ = s.shutdown(Shutdown::Both);
            }
            link.channels.lock().clear();
        }
        // Wake the acceptor if it still waits for peers (if the connection
        // fails, the acceptor is gone or already woken).
        if let Some(addr) = self.local_addr {
            let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
        }
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn dial(addr: SocketAddr, peer: usize) -> Result<TcpStream> {
    let start = Instant::now();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            // Every peer listens before it greets the driver, so a refusal
            // means a wrong advertised address or a dead peer: fail soon.
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && start.elapsed() < REFUSED_PATIENCE =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e)
                if e.kind() != std::io::ErrorKind::ConnectionRefused
                    && start.elapsed() < CONNECT_PATIENCE =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(lost(
                    peer,
                    &format!("cannot connect to {addr} (the address it advertised): {e}"),
                ))
            }
        }
    }
}

fn read_credits(mut stream: TcpStream, link: Arc<OutLink>) {
    while let Ok(Some(frame)) = read_frame(&mut stream) {
        if frame.tag != TAG_CREDIT {
            break;
        }
        let Ok(n) = Dec::new(&frame.payload).u32() else {
            break;
        };
        let mut credits = link.credits.lock();
        *credits.entry(frame.channel).or_insert(0) += i64::from(n);
        link.ready.notify_all();
    }
    link.fail();
}

fn accept_peers(
    listener: TcpListener,
    inb: HashMap<usize, Arc<InLink>>,
    expected: Vec<usize>,
    secret: Secret,
    attempt: u64,
    shutdown: Arc<AtomicBool>,
) {
    let mut waiting: Vec<usize> = expected;
    while !waiting.is_empty() && !shutdown.load(Ordering::SeqCst) {
        let Ok((mut stream, _)) = listener.accept() else {
            continue;
        };
        if shutdown.load(Ordering::SeqCst) {
            return;
        }
        if server_handshake(&mut stream, &secret).is_err() {
            continue;
        }
        let Ok(Some(hello)) = read_frame(&mut stream) else {
            continue;
        };
        let mut d = Dec::new(&hello.payload);
        let (Ok(peer), Ok(their_attempt)) = (d.u32(), d.u64()) else {
            continue;
        };
        let peer = peer as usize;
        // Fencing: a peer of another attempt (a zombie) is turned away.
        if hello.tag != TAG_PEER_HELLO || their_attempt != attempt || !waiting.contains(&peer) {
            continue;
        }
        let Some(link) = inb.get(&peer).cloned() else {
            continue;
        };
        // Latency only: a socket without it still carries every frame.
        let _ = stream.set_nodelay(true);
        let Ok(writer) = stream.try_clone() else {
            continue;
        };
        *link.writer.lock() = Some(writer);
        waiting.retain(|p| *p != peer);
        let reader = link.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("eddyline-recv-{peer}"))
            .spawn(move || read_data(stream, reader, peer));
        if let Err(e) = spawned {
            // Nobody would read the peer's channels: close them (their
            // tasks stop, the attempt fails and restarts) and say why.
            eprintln!(
                "eddyline: cannot start the thread reading the data of worker {peer} \
                 ({e}); its channels are closed and the attempt fails"
            );
            link.channels.lock().clear();
        }
    }
}

fn read_data(mut stream: TcpStream, link: Arc<InLink>, peer: usize) {
    if let Err(why) = deliver(&mut stream, &link) {
        // A frame this worker cannot use: the connection is dropped, and
        // the tasks see their producer gone. Say what was wrong with it.
        eprintln!("eddyline: the data connection from worker {peer} is dropped: {why}");
    }
    // Dropping the senders disconnects the channels: a task still reading
    // one learns that its producer is gone.
    link.channels.lock().clear();
}

/// Delivers the connection's frames to their channels until it closes or
/// breaks (`Ok`: the peer's loss is reported by the driver) or a frame is
/// malformed (`Err`, why).
fn deliver(stream: &mut TcpStream, link: &InLink) -> std::result::Result<(), String> {
    let senders: HashMap<u32, InChannel> = link.channels.lock().clone();
    if senders.is_empty() {
        return Ok(()); // shut down before it started
    }
    let mut decoders: HashMap<u32, BatchDecoder> = HashMap::new();
    while let Ok(Some(frame)) = read_frame(stream) {
        let Some((tx, priority)) = senders.get(&frame.channel) else {
            return Err(format!("a frame for unknown channel {}", frame.channel));
        };
        if frame.tag == TAG_PRIORITY {
            // Its marker came first, in the frame before (FLIP-76).
            match decode_control_event(&frame.payload) {
                Ok(Event::Barrier(b)) => priority.push(b),
                Ok(other) => return Err(format!("a priority frame holding {other:?}")),
                Err(e) => return Err(format!("a malformed priority frame: {e}")),
            }
            continue;
        }
        let event = match frame.tag {
            TAG_DATA | TAG_DATA_FRESH => decoders
                .entry(frame.channel)
                .or_default()
                .decode(frame.tag == TAG_DATA_FRESH, frame.payload)
                .map(Event::Data)
                .map_err(|e| format!("a malformed batch: {e}"))?,
            TAG_EVENT => decode_control_event(&frame.payload)
                .map_err(|e| format!("a malformed control event: {e}"))?,
            tag => return Err(format!("a frame of unknown kind {tag}")),
        };
        let bytes = event_bytes(&event);
        if tx.send((event, bytes)).is_err() {
            // The task is gone (its attempt ended); nothing more to deliver.
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array};
    use arrow::record_batch::RecordBatch;

    fn batch(n: i64) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
        RecordBatch::try_from_iter([("v", a)]).unwrap()
    }

    fn planes(secret: &Secret, capacity: usize) -> (DataPlane, DataPlane, Vec<SocketAddr>) {
        let l0 = TcpListener::bind("127.0.0.1:0").unwrap();
        let l1 = TcpListener::bind("127.0.0.1:0").unwrap();
        let addrs = vec![l0.local_addr().unwrap(), l1.local_addr().unwrap()];
        (
            DataPlane::new(0, 1, secret.clone(), l0, capacity),
            DataPlane::new(1, 1, secret.clone(), l1, capacity),
            addrs,
        )
    }

    #[test]
    fn events_cross_in_order_with_backpressure() {
        let secret = Secret::generate().unwrap();
        let (mut p0, mut p1, addrs) = planes(&secret, 2);
        let tx_a = p0.outbound(1, 7);
        let tx_b = p0.outbound(1, 8);
        let (rx_a, cr_a) = p1.inbound(0, 7);
        let (rx_b, cr_b) = p1.inbound(0, 8);
        p1.start(&addrs).unwrap();
        p0.start(&addrs).unwrap();
        // Channel 7 is not consumed: its sender runs out of credit after 2
        // events, while channel 8 keeps flowing on the same connection.
        let blocked = std::thread::spawn(move || {
            for i in 0..5 {
                tx_a.send(Event::Watermark(i)).unwrap();
            }
            tx_a.send(Event::EndOfPartition).unwrap();
        });
        for i in 0..50 {
            tx_b.send(Event::Data(batch(i % 7 + 1))).unwrap();
            let ev = rx_b.queue().recv().unwrap().0;
            cr_b.consumed();
            assert_eq!(ev.num_rows(), (i % 7 + 1) as usize);
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(rx_a.queue().len(), 2, "the sender must stop at its credit");
        let mut got = Vec::new();
        loop {
            let ev = rx_a.queue().recv().unwrap().0;
            cr_a.consumed();
            match ev {
                Event::Watermark(w) => got.push(w),
                Event::EndOfPartition => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        blocked.join().unwrap();
    }

    #[test]
    fn an_overtaking_barrier_jumps_the_queue_without_waiting_for_credit() {
        use crate::event::BarrierKind;
        let secret = Secret::generate().unwrap();
        let (mut p0, mut p1, addrs) = planes(&secret, 2);
        let tx = p0.outbound(1, 3);
        let (rx, credit) = p1.inbound(0, 3);
        p1.start(&addrs).unwrap();
        p0.start(&addrs).unwrap();
        tx.send(Event::Data(batch(1))).unwrap();
        tx.send(Event::Data(batch(2))).unwrap();
        // No credit left: the barrier still goes (FLIP-76).
        let b = Barrier {
            id: 4,
            kind: BarrierKind::Checkpoint,
            aligned: false,
            timestamp_ms: 0,
        };
        tx.send_overtaking(b).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = loop {
            if let Some(got) = rx.take_priority() {
                break got;
            }
            assert!(
                Instant::now() < deadline,
                "the priority frame never arrived"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(got, b);
        let mut overtaken = std::collections::VecDeque::new();
        assert!(rx.drain_to_marker(4, &mut overtaken));
        let rows: Vec<usize> = overtaken.iter().map(|(e, _)| e.num_rows()).collect();
        assert_eq!(rows, vec![1, 2]);
        // Three events taken (two batches and the marker): three credits
        // back, so after the overdraft the sender has two again.
        for _ in 0..3 {
            credit.consumed();
        }
        tx.send(Event::Data(batch(3))).unwrap();
        tx.send(Event::Data(batch(4))).unwrap();
        let rows: Vec<usize> = (0..2)
            .map(|_| rx.queue().recv().unwrap().0.num_rows())
            .collect();
        assert_eq!(rows, vec![3, 4]);
    }

    #[test]
    fn a_peer_of_another_attempt_is_fenced() {
        let secret = Secret::generate().unwrap();
        let l1 = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr1 = l1.local_addr().unwrap();
        let l0 = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr0 = l0.local_addr().unwrap();
        let mut zombie = DataPlane::new(0, 1, secret.clone(), l0, 4);
        let mut p1 = DataPlane::new(1, 2, secret.clone(), l1, 4);
        let z = zombie.outbound(1, 3);
        let (rx, _cr) = p1.inbound(0, 3);
        p1.start(&[addr0, addr1]).unwrap();
        zombie.start(&[addr0, addr1]).unwrap();
        // The zombie's frames never reach the consumer (its send may
        // succeed or find the connection closed: either is right).
        let _ = z.send(Event::Watermark(1));
        assert!(rx.queue().recv_timeout(Duration::from_millis(300)).is_err());
        p1.shutdown();
    }

    #[test]
    fn a_malformed_frame_closes_the_channels_it_carries() {
        let secret = Secret::generate().unwrap();
        let l1 = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr1 = l1.local_addr().unwrap();
        let mut p1 = DataPlane::new(1, 1, secret.clone(), l1, 4);
        let (rx, _cr) = p1.inbound(0, 3);
        p1.start(&[addr1, addr1]).unwrap();
        // Worker 0 as a peer that sends one good event, then garbage.
        let mut s = TcpStream::connect(addr1).unwrap();
        client_handshake(&mut s, &secret).unwrap();
        let mut hello = Enc::default();
        hello.u32(0).u64(1);
        write_frame(&mut s, TAG_PEER_HELLO, 0, &[&hello.0]).unwrap();
        let good = encode_control_event(&Event::Watermark(7));
        write_frame(&mut s, TAG_EVENT, 3, &[&good]).unwrap();
        write_frame(&mut s, TAG_EVENT, 3, &[&[0xff, 1, 2]]).unwrap();
        let timeout = Duration::from_secs(10);
        let (first, _) = rx.queue().recv_timeout(timeout).unwrap();
        assert!(matches!(first, Event::Watermark(7)), "{first:?}");
        // The socket is still open, yet the task learns its producer is
        // gone (rather than waiting forever for the next frame).
        assert_eq!(
            rx.queue().recv_timeout(timeout).err(),
            Some(crossbeam_channel::RecvTimeoutError::Disconnected)
        );
        drop(s);
    }

    #[test]
    fn shutdown_releases_a_sender_waiting_for_credit() {
        let secret = Secret::generate().unwrap();
        let (mut p0, mut p1, addrs) = planes(&secret, 1);
        let tx = Arc::new(p0.outbound(1, 1));
        let (_rx, _cr) = p1.inbound(0, 1);
        p1.start(&addrs).unwrap();
        p0.start(&addrs).unwrap();
        tx.send(Event::Watermark(0)).unwrap();
        let t = {
            let tx = tx.clone();
            std::thread::spawn(move || tx.send(Event::Watermark(1)))
        };
        std::thread::sleep(Duration::from_millis(50));
        p0.shutdown();
        assert!(t.join().unwrap().is_err());
    }
}

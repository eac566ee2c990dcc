//! The state file format (version 1; the layout is drawn in the parent
//! module's docs): one file per (operator uid, subtask) holding its operator
//! state and its key groups as checksummed sections (DESIGN.md
//! "Checkpoints"). Writing and reading a file is all this module does; which
//! files make a checkpoint is `storage.rs`'s business.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::manifest::{key_group_ranges, StateFileEntry};
use crate::error::{Error, Result};
use crate::state::{DeferredState, OperatorState, StateBlob};
use crate::store::{ObjectWriter, Store};

const STATE_MAGIC: &[u8; 8] = b"EDDYSTAT";
/// State file format version.
const STATE_VERSION: u32 = 1;
pub(crate) const TAG_OPERATOR: u8 = 0;
pub(crate) const TAG_KEYED: u8 = 1;
/// Bytes of a section header: tag, key group, length, checksum.
pub(crate) const SECTION_HEADER: usize = 1 + 4 + 8 + 8;

/// One section to write: tag, key group (0 for operator state), payload.
pub(crate) type Section = (u8, u32, Payload);

/// A section's payload: serialized bytes, or a deferred view that already
/// holds its bytes as runs ([`DeferredState::runs`]), written run by run
/// without joining them into one buffer (one copy of a large Python sink
/// transaction less on the writer thread; benches/RESULTS.md "W3").
pub(crate) enum Payload {
    Bytes(Arc<Vec<u8>>),
    /// Bytes whose keyed section checksum ([`keyed_section_checksum`]) is
    /// already known (an incremental write computed it to compare), so it
    /// is not computed again.
    Checked(Arc<Vec<u8>>, u64),
    Runs(Arc<dyn DeferredState>),
    /// A blob serialized only when its section is written, and dropped
    /// right after: a file of many key groups then holds one key group's
    /// bytes in memory at a time, written while they are still in the cache,
    /// instead of all of them (benches/RESULTS.md "W3: the checkpoint cost, cut").
    Later(StateBlob),
}

impl Payload {
    /// The payload of `blob`: its runs when it has them, else its bytes.
    pub(crate) fn of(blob: &StateBlob) -> Result<Payload> {
        match blob {
            StateBlob::Deferred(d) if d.runs().is_some() => Ok(Payload::Runs(d.clone())),
            _ => Ok(Payload::Bytes(blob.to_bytes()?)),
        }
    }

    /// Its bytes, as runs, serializing a [`Payload::Later`] blob into
    /// `later`; and its section checksum when known.
    fn runs<'a>(
        &'a self,
        later: &'a mut Option<Arc<Vec<u8>>>,
    ) -> Result<(Vec<&'a [u8]>, Option<u64>)> {
        Ok(match self {
            Payload::Bytes(b) => (vec![b.as_slice()], None),
            Payload::Checked(b, sum) => (vec![b.as_slice()], Some(*sum)),
            Payload::Runs(d) => (d.runs().unwrap_or_default(), None),
            Payload::Later(blob) => (vec![later.insert(blob.to_bytes()?).as_slice()], None),
        })
    }
}

/// What writing a state file gave: its size, the xxh3-64 of its bytes, and
/// per keyed section (sorted by key group) the key group, the section's
/// checksum and the section's bytes (header included).
pub(crate) struct WrittenFile {
    pub size: u64,
    pub checksum: u64,
    pub groups: Vec<(u32, u64, u64)>,
}

/// The checksum a keyed section of `group` with `payload` carries: equal
/// payloads of one key group give equal checksums, so it also tells an
/// incremental checkpoint whether a key group changed.
pub(crate) fn keyed_section_checksum(group: u32, payload: &[u8]) -> u64 {
    section_checksum(
        &section_head(TAG_KEYED, group, payload.len())[..13],
        payload,
    )
}

fn section_head(tag: u8, group: u32, len: usize) -> [u8; SECTION_HEADER] {
    let mut head = [0u8; SECTION_HEADER];
    head[0] = tag;
    head[1..5].copy_from_slice(&group.to_le_bytes());
    head[5..13].copy_from_slice(&(len as u64).to_le_bytes());
    head
}

/// The state file name of (`uid`, `subtask`): a readable prefix of the uid
/// plus its hash, so any uid gives a safe, unique file name.
pub(crate) fn file_name(uid: &str, subtask: u32) -> String {
    let readable: String = uid
        .chars()
        .take(48)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{readable}-{:016x}-{subtask}.state",
        xxh3_64(uid.as_bytes())
    )
}

/// Writes `state` as the new file `name` of `dir` (created, never
/// overwritten, then made durable: fsynced, or uploaded): its size, the
/// xxh3-64 of its bytes and its sorted key groups.
pub(crate) fn write(
    dir: &Store,
    name: &str,
    uid: &str,
    subtask: u32,
    state: &OperatorState,
) -> Result<WrittenFile> {
    let mut sections: Vec<Section> = Vec::with_capacity(state.keyed.len() + 1);
    if let Some(blob) = &state.operator {
        sections.push((TAG_OPERATOR, 0, Payload::of(blob)?));
    }
    for (group, blob) in &state.keyed {
        sections.push((TAG_KEYED, *group, Payload::Later(blob.clone())));
    }
    write_sections(dir, name, uid, subtask, &sections)
}

/// Writes already serialized `sections` as the new file `name` of `dir`
/// (see [`write`]).
pub(crate) fn write_sections(
    dir: &Store,
    name: &str,
    uid: &str,
    subtask: u32,
    sections: &[Section],
) -> Result<WrittenFile> {
    let path = dir.location_of(name);
    let fail = |msg: String| Error::checkpoint(Some(path.clone()), msg);
    let mut keyed: Vec<u32> = sections
        .iter()
        .filter(|s| s.0 == TAG_KEYED)
        .map(|s| s.1)
        .collect();
    keyed.sort_unstable();
    if let Some(w) = keyed.windows(2).find(|w| w[0] == w[1]) {
        return Err(fail(format!(
            "the state of operator '{uid}' subtask {subtask} holds key group {} twice",
            w[0]
        )));
    }
    let mut groups: Vec<(u32, u64, u64)> = Vec::with_capacity(keyed.len());
    let io_fail = |e: io::Error| {
        fail(format!(
            "cannot write the state file '{}' of operator '{uid}' subtask {subtask}: {e}",
            path.display()
        ))
    };
    let out = HashingWriter {
        inner: dir.create_uncached(name).map_err(io_fail)?,
        hash: Xxh3::new(),
        size: 0,
    };
    let written = write_into(out, uid, subtask, sections, &mut groups, &io_fail);
    if written.is_err() {
        // Serializing a section failed, or the disk: no partial file is left
        // behind (a checkpoint that fails is aborted; a retry writes anew).
        let _ = dir.remove(name);
    }
    let (size, checksum) = written?;
    groups.sort_unstable_by_key(|g| g.0);
    Ok(WrittenFile {
        size,
        checksum,
        groups,
    })
}

/// Writes the header and `sections` into `out` and finishes it (made
/// durable): the file's size and xxh3-64. Pushes each keyed section's key
/// group, checksum and bytes onto `groups`.
fn write_into(
    mut out: HashingWriter,
    uid: &str,
    subtask: u32,
    sections: &[Section],
    groups: &mut Vec<(u32, u64, u64)>,
    io_fail: &dyn Fn(io::Error) -> Error,
) -> Result<(u64, u64)> {
    let mut header = Vec::with_capacity(32 + uid.len());
    header.extend_from_slice(STATE_MAGIC);
    header.extend_from_slice(&STATE_VERSION.to_le_bytes());
    header.extend_from_slice(&subtask.to_le_bytes());
    header.extend_from_slice(&(uid.len() as u32).to_le_bytes());
    header.extend_from_slice(uid.as_bytes());
    header.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    let header_sum = xxh3_64(&header);
    header.extend_from_slice(&header_sum.to_le_bytes());
    out.put(&header).map_err(io_fail)?;
    for (tag, group, payload) in sections {
        let mut later = None;
        let (runs, known) = payload.runs(&mut later)?;
        let len: usize = runs.iter().map(|r| r.len()).sum();
        let mut head = section_head(*tag, *group, len);
        let sum = known.unwrap_or_else(|| {
            let mut h = Xxh3::new();
            h.update(&head[..13]);
            for r in &runs {
                h.update(r);
            }
            h.digest()
        });
        head[13..21].copy_from_slice(&sum.to_le_bytes());
        out.put(&head).map_err(io_fail)?;
        for r in &runs {
            out.put(r).map_err(io_fail)?;
        }
        if *tag == TAG_KEYED {
            groups.push((*group, sum, (SECTION_HEADER + len) as u64));
        }
    }
    let HashingWriter { inner, hash, size } = out;
    inner.finish().map_err(io_fail)?;
    Ok((size, hash.digest()))
}

fn section_checksum(head: &[u8], payload: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(head);
    h.update(payload);
    h.digest()
}

/// Writes while hashing and counting every byte.
struct HashingWriter {
    inner: ObjectWriter,
    hash: Xxh3,
    size: u64,
}

impl HashingWriter {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_all(bytes)?;
        self.hash.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }
}

/// Reads one state file and checks it against its manifest entry.
pub(crate) fn read(
    dir: &Store,
    uid: &str,
    subtask: u32,
    entry: &StateFileEntry,
) -> Result<OperatorState> {
    let what = format!(
        "the state file '{}' of operator '{uid}' subtask {subtask}",
        entry.file
    );
    let plain = Path::new(&entry.file)
        .file_name()
        .is_some_and(|n| n == entry.file.as_str());
    let path = dir.location_of(&entry.file);
    let fail = |msg: String| Error::checkpoint(Some(path.clone()), format!("{what} {msg}"));
    if !plain || entry.file.starts_with('.') {
        return Err(fail(
            "is not a plain file name inside the checkpoint directory".into(),
        ));
    }
    let bytes = match dir.read(&entry.file) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(fail(format!(
                "is missing: '{}' does not exist",
                path.display()
            )))
        }
        Err(e) => return Err(fail(format!("cannot be read: {e}"))),
    };
    let size = bytes.len() as u64;
    if size < entry.size {
        return Err(fail(format!(
            "is truncated: it has {size} bytes, the manifest records {}",
            entry.size
        )));
    }
    if size > entry.size {
        return Err(fail(format!(
            "is corrupt: it has {size} bytes, the manifest records {}",
            entry.size
        )));
    }
    let sum = xxh3_64(&bytes);
    if sum != entry.checksum {
        return Err(fail(format!(
            "is corrupt: its xxh3 checksum is {sum:016x}, the manifest records {:016x}",
            entry.checksum
        )));
    }
    let state = decode(&bytes, uid, subtask).map_err(|m| fail(format!("is corrupt: {m}")))?;
    let mut groups: Vec<u32> = state.keyed.iter().map(|(g, _)| *g).collect();
    groups.sort_unstable();
    if key_group_ranges(&groups) != entry.key_groups {
        return Err(fail(
            "is corrupt: its key groups differ from those the manifest records".into(),
        ));
    }
    Ok(state)
}

/// A cursor over a state file's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "it ends at byte {} inside a field of {n} bytes",
                    self.bytes.len()
                )
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

fn decode(bytes: &[u8], uid: &str, subtask: u32) -> Result<OperatorState, String> {
    let mut r = Reader { bytes, pos: 0 };
    if r.take(STATE_MAGIC.len())? != STATE_MAGIC {
        return Err("it does not start with the state file magic".into());
    }
    let version = r.u32()?;
    if version != STATE_VERSION {
        return Err(format!(
            "it has format version {version}; this build reads version {STATE_VERSION}"
        ));
    }
    let file_subtask = r.u32()?;
    let uid_len = r.u32()? as usize;
    let file_uid = r.take(uid_len)?;
    let count = r.u32()?;
    let header_end = r.pos;
    if r.u64()? != xxh3_64(&bytes[..header_end]) {
        return Err("its header checksum does not match".into());
    }
    if file_uid != uid.as_bytes() || file_subtask != subtask {
        return Err(format!(
            "it holds the state of operator '{}' subtask {file_subtask}",
            String::from_utf8_lossy(file_uid)
        ));
    }
    let mut state = OperatorState::default();
    for i in 0..count {
        let head = r.take(13)?;
        let tag = head[0];
        let mut g = [0u8; 4];
        g.copy_from_slice(&head[1..5]);
        let mut l = [0u8; 8];
        l.copy_from_slice(&head[5..13]);
        let len = usize::try_from(u64::from_le_bytes(l))
            .map_err(|_| format!("section {i} is too long"))?;
        let sum = r.u64()?;
        let payload = r.take(len)?;
        if section_checksum(head, payload) != sum {
            return Err(format!("the checksum of section {i} does not match"));
        }
        let blob = StateBlob::Bytes(Arc::new(payload.to_vec()));
        match tag {
            TAG_OPERATOR if state.operator.is_none() => state.operator = Some(blob),
            TAG_KEYED => state.keyed.push((u32::from_le_bytes(g), blob)),
            _ => return Err(format!("section {i} has an unknown or repeated tag {tag}")),
        }
    }
    if r.pos != bytes.len() {
        return Err(format!(
            "{} bytes follow its last section",
            bytes.len() - r.pos
        ));
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::CheckpointStorage;
    use std::fs;

    fn blob(b: &[u8]) -> StateBlob {
        StateBlob::Bytes(Arc::new(b.to_vec()))
    }

    #[test]
    fn test_state_file_name_is_safe_and_unique() {
        let a = file_name("a/b", 0);
        let b = file_name("a_b", 0);
        assert_ne!(a, b);
        assert!(a.starts_with("a_b-") && a.ends_with("-0.state"), "{a}");
        assert!(!file_name("../x", 1).contains('/'));
        assert!(file_name(&"é".repeat(300), 1).len() < 200);
    }

    #[test]
    fn test_state_file_round_trip_and_section_checksum() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let pending = storage.begin(1)?;
        let state = OperatorState {
            operator: Some(blob(b"offsets")),
            keyed: vec![(5, blob(b"five")), (3, blob(b"")), (4, blob(b"four"))],
        };
        let h = pending.write_state("op", 2, &state)?.file.expect("a file");
        assert_eq!(h.key_groups, vec![3..6]);
        let path = pending.dir().join(&h.file);
        let bytes = fs::read(&path).expect("read");
        assert_eq!(bytes.len() as u64, h.size);
        let back = decode(&bytes, "op", 2).expect("decode");
        assert_eq!(
            back.operator.and_then(|b| b.as_bytes().map(<[u8]>::to_vec)),
            Some(b"offsets".to_vec())
        );
        assert_eq!(back.keyed.len(), 3);
        // A flipped payload byte fails its section checksum.
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let err = decode(&bad, "op", 2).expect_err("corrupt");
        assert!(err.contains("section 3"), "{err}");
        // Another operator's file is refused.
        assert!(decode(&bytes, "other", 2).is_err());
        Ok(())
    }

    /// A view that holds its bytes as runs (as a Python sink's pending
    /// transactions do) and counts how often it was joined.
    struct Runs(Vec<Vec<u8>>, std::sync::atomic::AtomicUsize);

    impl DeferredState for Runs {
        fn serialize(&self) -> Result<Vec<u8>> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(self.0.concat())
        }
        fn runs(&self) -> Option<Vec<&[u8]>> {
            Some(self.0.iter().map(Vec::as_slice).collect())
        }
    }

    /// A key group whose serialization fails (a bug in an operator's format).
    struct Fails;

    impl DeferredState for Fails {
        fn serialize(&self) -> Result<Vec<u8>> {
            Err(Error::checkpoint(None, "key group 9 cannot be encoded"))
        }
    }

    /// Key groups are serialized while the file is written (one at a time):
    /// one that fails fails the write with its cause, and no partial file is
    /// left in the checkpoint directory.
    #[test]
    fn test_state_file_failing_key_group_leaves_no_partial_file() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let pending = storage.begin(1)?;
        let state = OperatorState {
            operator: None,
            keyed: vec![
                (3, blob(&[1u8; 50_000])),
                (9, StateBlob::Deferred(Arc::new(Fails))),
            ],
        };
        let err = pending.write_state("op", 0, &state).expect_err("fails");
        assert!(
            err.to_string().contains("key group 9 cannot be encoded"),
            "{err}"
        );
        let left: Vec<_> = fs::read_dir(pending.dir())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n.to_string_lossy().ends_with(".state"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        Ok(())
    }

    #[test]
    fn test_state_file_writes_runs_without_joining_them_and_reads_them_back() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(tmp.path())?;
        let pending = storage.begin(1)?;
        let runs = Arc::new(Runs(
            vec![
                b"head".to_vec(),
                Vec::new(),
                // Past two 1 MiB chunks: the file is written past the page
                // cache (store/uncached.rs), then read back as any other.
                (0..2_500_000u32).map(|i| (i % 251) as u8).collect(),
                b"tail".to_vec(),
            ],
            Default::default(),
        ));
        let joined = runs.0.concat();
        let state = OperatorState {
            operator: Some(StateBlob::Deferred(runs.clone())),
            keyed: vec![(1, blob(b"one"))],
        };
        let h = pending.write_state("op", 0, &state)?.file.expect("a file");
        assert_eq!(
            runs.1.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "joined"
        );
        let bytes = fs::read(pending.dir().join(&h.file)).expect("read");
        assert_eq!(bytes.len() as u64, h.size);
        assert_eq!(xxh3_64(&bytes), h.checksum);
        // The same file as from the joined bytes: section checksums included.
        let back = decode(&bytes, "op", 0).expect("decode");
        assert_eq!(
            back.operator.and_then(|b| b.as_bytes().map(<[u8]>::to_vec)),
            Some(joined.clone())
        );
        let plain = storage.begin(2)?;
        let state = OperatorState {
            operator: Some(blob(&joined)),
            keyed: vec![(1, blob(b"one"))],
        };
        let h2 = plain.write_state("op", 0, &state)?.file.expect("a file");
        assert_eq!(h2.checksum, h.checksum);
        Ok(())
    }
}

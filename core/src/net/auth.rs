//! Per-job secret and the mutual challenge-response every connection starts
//! with: each side proves it knows the secret by an HMAC-SHA256 over both
//! sides' fresh nonces, so a recorded handshake cannot be replayed and a
//! process without the secret can neither send nor receive job data.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};

type HmacSha256 = Hmac<Sha256>;

const MAGIC: &[u8; 8] = b"EDDYLN01";
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);

/// The secret shared by the driver and the workers of one job.
#[derive(Clone)]
pub struct Secret([u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

fn random<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b)
        .map_err(|e| Error::runtime(format!("no randomness for the job secret: {e}")))?;
    Ok(b)
}

impl Secret {
    /// A fresh random secret.
    pub fn generate() -> Result<Secret> {
        Ok(Secret(random::<32>()?))
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Secret> {
        let bad = || Error::runtime("the job secret must be 64 hex digits");
        if s.len() != 64 || !s.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Secret(out))
    }

    /// The secret as 64 hex digits (handed to workers in their environment).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(&self, role: &[u8], a: &[u8], b: &[u8]) -> Result<HmacSha256> {
        let mut m = HmacSha256::new_from_slice(&self.0)
            .map_err(|e| Error::runtime(format!("HMAC key: {e}")))?;
        m.update(MAGIC);
        m.update(role);
        m.update(a);
        m.update(b);
        Ok(m)
    }
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::runtime(format!("connection handshake failed ({what}): {e}"))
}

fn rejected() -> Error {
    Error::runtime("a connection was rejected: the peer does not know this job's secret")
}

/// The dialing side: proves itself and checks the listener.
pub fn client_handshake(stream: &mut TcpStream, secret: &Secret) -> Result<()> {
    stream
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| io_err("timeout", e))?;
    let nonce_c = random::<32>()?;
    let mut hello = Vec::with_capacity(40);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&nonce_c);
    stream.write_all(&hello).map_err(|e| io_err("send", e))?;
    let mut reply = [0u8; 64];
    stream
        .read_exact(&mut reply)
        .map_err(|e| io_err("receive", e))?;
    let (nonce_s, mac_s) = reply.split_at(32);
    secret
        .mac(b"listener", &nonce_c, nonce_s)?
        .verify_slice(mac_s)
        .map_err(|_| rejected())?;
    let proof = secret.mac(b"dialer", nonce_s, &nonce_c)?.finalize();
    stream
        .write_all(&proof.into_bytes())
        .map_err(|e| io_err("send", e))?;
    let mut ok = [0u8; 1];
    stream.read_exact(&mut ok).map_err(|_| rejected())?;
    stream
        .set_read_timeout(None)
        .map_err(|e| io_err("timeout", e))?;
    Ok(())
}

/// The listening side: checks the dialer and proves itself.
pub fn server_handshake(stream: &mut TcpStream, secret: &Secret) -> Result<()> {
    stream
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| io_err("timeout", e))?;
    let mut hello = [0u8; 40];
    stream
        .read_exact(&mut hello)
        .map_err(|e| io_err("receive", e))?;
    if &hello[..8] != MAGIC {
        return Err(Error::runtime(
            "a connection was rejected: it does not speak eddyline's protocol",
        ));
    }
    let nonce_c = &hello[8..];
    let nonce_s = random::<32>()?;
    let mac_s = secret.mac(b"listener", nonce_c, &nonce_s)?.finalize();
    let mut reply = Vec::with_capacity(64);
    reply.extend_from_slice(&nonce_s);
    reply.extend_from_slice(&mac_s.into_bytes());
    stream.write_all(&reply).map_err(|e| io_err("send", e))?;
    let mut proof = [0u8; 32];
    stream
        .read_exact(&mut proof)
        .map_err(|e| io_err("receive", e))?;
    secret
        .mac(b"dialer", &nonce_s, nonce_c)?
        .verify_slice(&proof)
        .map_err(|_| rejected())?;
    stream.write_all(&[1]).map_err(|e| io_err("send", e))?;
    stream
        .set_read_timeout(None)
        .map_err(|e| io_err("timeout", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(server: Secret, client: Secret) -> (Result<()>, Result<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            server_handshake(&mut s, &server)
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let rc = client_handshake(&mut c, &client);
        drop(c);
        (t.join().unwrap(), rc)
    }

    #[test]
    fn same_secret_is_accepted_by_both_sides() {
        let s = Secret::generate().unwrap();
        let (a, b) = pair(s.clone(), s);
        a.unwrap();
        b.unwrap();
    }

    #[test]
    fn a_wrong_secret_is_rejected_by_both_sides() {
        let (a, b) = pair(Secret::generate().unwrap(), Secret::generate().unwrap());
        assert!(a.is_err());
        assert!(b.unwrap_err().to_string().contains("secret"));
    }

    #[test]
    fn hex_round_trips_and_bad_hex_is_an_error() {
        let s = Secret::generate().unwrap();
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap().0, s.0);
        assert!(Secret::from_hex("abc").is_err());
        assert!(Secret::from_hex(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn garbage_is_not_our_protocol() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            server_handshake(&mut s, &Secret::generate().unwrap())
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&[b'G'; 40]).unwrap();
        assert!(t
            .join()
            .unwrap()
            .unwrap_err()
            .to_string()
            .contains("protocol"));
    }
}

//! A minimal DNS client (one A query over UDP), so scripts can check the cluster DNS without
//! `dig`/`nslookup`, which this machine does not have.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    /// 0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED.
    pub rcode: u8,
    pub addresses: Vec<Ipv4Addr>,
}

pub fn rcode_name(rcode: u8) -> &'static str {
    match rcode {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        _ => "other",
    }
}

/// A recursive-desired query for the A records of `name`.
pub fn encode_query(id: u16, name: &str) -> Result<Vec<u8>> {
    let mut q = Vec::with_capacity(name.len() + 18);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD; 1 question
    for label in name.trim_end_matches('.').split('.') {
        ensure!(!label.is_empty() && label.len() < 64, "invalid DNS name {name:?}");
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&[0, 1, 0, 1]); // type A, class IN
    Ok(q)
}

/// Skips a possibly compressed name starting at `pos`; returns the position after it.
fn skip_name(msg: &[u8], mut pos: usize) -> Result<usize> {
    loop {
        let len = *msg.get(pos).context("truncated name")? as usize;
        match len {
            0 => return Ok(pos + 1),
            l if l & 0xc0 == 0xc0 => return Ok(pos + 2),
            l => pos += 1 + l,
        }
    }
}

pub fn parse_response(id: u16, msg: &[u8]) -> Result<Answer> {
    ensure!(msg.len() >= 12, "short DNS response");
    ensure!(u16::from_be_bytes([msg[0], msg[1]]) == id, "DNS response id mismatch");
    ensure!(msg[2] & 0x80 != 0, "not a DNS response");
    let rcode = msg[3] & 0x0f;
    let qdcount = u16::from_be_bytes([msg[4], msg[5]]);
    let ancount = u16::from_be_bytes([msg[6], msg[7]]);
    let mut pos = 12;
    for _ in 0..qdcount {
        pos = skip_name(msg, pos)? + 4;
    }
    let mut addresses = Vec::new();
    for _ in 0..ancount {
        pos = skip_name(msg, pos)?;
        let rr = msg.get(pos..pos + 10).context("truncated answer")?;
        let (rtype, rdlen) = (u16::from_be_bytes([rr[0], rr[1]]), u16::from_be_bytes([rr[8], rr[9]]) as usize);
        pos += 10;
        let data = msg.get(pos..pos + rdlen).context("truncated answer data")?;
        if rtype == 1 && rdlen == 4 {
            addresses.push(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        pos += rdlen;
    }
    Ok(Answer { rcode, addresses })
}

pub fn query(server: SocketAddr, name: &str, timeout: Duration) -> Result<Answer> {
    let id = (std::process::id() as u16) ^ 0x5a5a;
    let sock = UdpSocket::bind(if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })?;
    sock.set_read_timeout(Some(timeout))?;
    sock.connect(server).with_context(|| format!("connect to {server}"))?;
    sock.send(&encode_query(id, name)?)?;
    let mut buf = [0u8; 1500];
    let n = match sock.recv(&mut buf) {
        Ok(n) => n,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            bail!("no answer from {server} within {timeout:?}")
        }
        Err(e) => return Err(e).with_context(|| format!("query {server}")),
    };
    parse_response(id, &buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_a_query() {
        let q = encode_query(0x1234, "a.bc.").unwrap();
        assert_eq!(q, [0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'a', 2, b'b', b'c', 0, 0, 1, 0, 1]);
        assert!(encode_query(1, "a..b").is_err());
    }

    #[test]
    fn parses_answers_with_compressed_names() {
        let mut msg = encode_query(7, "x.svc").unwrap();
        msg[2] = 0x81; // response, RD
        msg[3] = 0x80; // RA, NOERROR
        msg[7] = 2; // 2 answers
        for ip in [[10, 96, 0, 1], [10, 244, 0, 5]] {
            msg.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
            msg.extend_from_slice(&ip);
        }
        let a = parse_response(7, &msg).unwrap();
        assert_eq!(a, Answer { rcode: 0, addresses: vec![Ipv4Addr::new(10, 96, 0, 1), Ipv4Addr::new(10, 244, 0, 5)] });
        assert!(parse_response(8, &msg).is_err());
    }

    #[test]
    fn parses_nxdomain() {
        let mut msg = encode_query(9, "nope.cluster.local").unwrap();
        msg[2] = 0x81;
        msg[3] = 0x83;
        let a = parse_response(9, &msg).unwrap();
        assert_eq!((rcode_name(a.rcode), a.addresses.len()), ("NXDOMAIN", 0));
    }
}

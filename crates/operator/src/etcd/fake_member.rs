//! A fake etcd member for the adapter's tests: a gRPC server (HTTP/2, no TLS) on a local port
//! that answers the calls an observation makes (Authenticate, Status, MemberList) as a
//! one-member cluster with authentication on, its logins after a chosen delay. How long a
//! member takes to log a client in (a bcrypt hash, then a raft entry) is what it is for: on a
//! busy node etcd's own answer is slow, and no real member can be made slow on demand.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;

pub const CLUSTER_ID: u64 = 0x42;

pub struct FakeMember {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Authenticate calls answered.
    pub logins: Arc<AtomicUsize>,
}

impl FakeMember {
    /// Member `id`, answering each Authenticate after `login_delay`.
    pub async fn start(id: u64, login_delay: Duration) -> FakeMember {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a local port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let logins = Arc::new(AtomicUsize::new(0));
        let (count, peer) = (logins.clone(), url.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (count, peer) = (count.clone(), peer.clone());
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(socket).await else { return };
                    while let Some(Ok((req, respond))) = conn.accept().await {
                        let (count, peer) = (count.clone(), peer.clone());
                        tokio::spawn(answer(req, respond, id, login_delay, count, peer));
                    }
                });
            }
        });
        FakeMember { url, logins }
    }
}

async fn answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    id: u64,
    login_delay: Duration,
    logins: Arc<AtomicUsize>,
    url: String,
) {
    let path = req.uri().path().to_string();
    let mut body = req.into_body();
    while let Some(Ok(d)) = body.data().await {
        let _ = body.flow_control().release_capacity(d.len());
    }
    let header = message(&[varint(1, CLUSTER_ID), varint(2, id), varint(4, 2)]);
    let reply = match path.as_str() {
        "/etcdserverpb.Auth/Authenticate" => {
            tokio::time::sleep(login_delay).await;
            logins.fetch_add(1, Ordering::SeqCst);
            Some(message(&[bytes(1, &header), bytes(2, format!("faketoken.{id}").as_bytes())]))
        }
        "/etcdserverpb.Maintenance/Status" => Some(message(&[
            bytes(1, &header),
            bytes(2, b"3.6.15"),
            varint(4, id),
            varint(5, 10),
            varint(6, 2),
            varint(7, 10),
        ])),
        "/etcdserverpb.Cluster/MemberList" => {
            let peer = url.replace("http://", "http://peer-");
            let member =
                message(&[varint(1, id), bytes(2, b"ex-a"), bytes(3, peer.as_bytes()), bytes(4, url.as_bytes())]);
            Some(message(&[bytes(1, &header), bytes(2, &member)]))
        }
        _ => None,
    };
    let head = http::Response::builder().status(200).header("content-type", "application/grpc").body(()).unwrap();
    let Ok(mut send) = respond.send_response(head, false) else { return };
    let mut trailers = http::HeaderMap::new();
    match reply {
        Some(m) => {
            let mut frame = vec![0u8];
            frame.extend_from_slice(&(m.len() as u32).to_be_bytes());
            frame.extend_from_slice(&m);
            let _ = send.send_data(Bytes::from(frame), false);
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        }
        // UNIMPLEMENTED
        None => drop(trailers.insert("grpc-status", http::HeaderValue::from_static("12"))),
    }
    let _ = send.send_trailers(trailers);
}

// Protocol buffers, by hand: the few fields answered here.

fn message(fields: &[Vec<u8>]) -> Vec<u8> {
    fields.concat()
}

fn uvarint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint(field: u64, v: u64) -> Vec<u8> {
    let mut out = vec![];
    uvarint(field << 3, &mut out);
    uvarint(v, &mut out);
    out
}

fn bytes(field: u64, b: &[u8]) -> Vec<u8> {
    let mut out = vec![];
    uvarint((field << 3) | 2, &mut out);
    uvarint(b.len() as u64, &mut out);
    out.extend_from_slice(b);
    out
}

//! A DNS server with a fixed zone, on loopback, for the resolver a test API uses: names resolve to exactly the
//! addresses a test gives them (and to nothing else), through the same resolver code and DNS messages as in
//! production. Messages are read and written with hickory's protocol types.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::Result;
use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};

/// A running zone: `name -> addresses`. Lives as long as the test's runtime.
pub struct TestDns {
    /// Where it answers (UDP).
    pub addr: SocketAddr,
}

impl TestDns {
    /// Serves `zone` (names without a trailing dot) on 127.0.0.1.
    pub async fn serve(zone: &[(&str, &[&str])]) -> Result<Self> {
        let zone: HashMap<String, Vec<IpAddr>> = zone
            .iter()
            .map(|(name, addrs)| {
                let addrs = addrs.iter().map(|a| a.parse()).collect::<Result<_, _>>()?;
                Ok((format!("{}.", name.to_ascii_lowercase()), addrs))
            })
            .collect::<Result<_>>()?;
        let zone = Arc::new(zone);
        let socket = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await?);
        let addr = socket.local_addr()?;
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                if let Some(answer) = answer(&zone, &buf[..n]) {
                    let _ = socket.send_to(&answer, from).await;
                }
            }
        });
        Ok(Self { addr })
    }
}

/// The answer to one query: the zone's A or AAAA records of the name, NXDOMAIN for a name it does not hold.
fn answer(zone: &HashMap<String, Vec<IpAddr>>, packet: &[u8]) -> Option<Vec<u8>> {
    let query = Message::from_vec(packet).ok()?;
    let mut reply = Message::response(query.metadata.id, OpCode::Query);
    reply.metadata.authoritative = true;
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    for q in &query.queries {
        reply.add_query(q.clone());
        let name = q.name().to_ascii().to_ascii_lowercase();
        let Some(addrs) = zone.get(&name) else {
            reply.metadata.response_code = ResponseCode::NXDomain;
            continue;
        };
        for ip in addrs {
            let rdata = match (q.query_type(), ip) {
                (RecordType::A, IpAddr::V4(v4)) => RData::A(A(*v4)),
                (RecordType::AAAA, IpAddr::V6(v6)) => RData::AAAA(AAAA(*v6)),
                _ => continue,
            };
            reply.add_answer(Record::from_rdata(q.name().clone(), 1, rdata));
        }
    }
    reply.to_vec().ok()
}

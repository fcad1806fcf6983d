//! A DNS server with a zone of the test's own, on loopback, for the resolver a test API uses: names resolve to exactly
//! the addresses a test gives them (and to nothing else), through the same resolver code and DNS messages as in
//! production. A test may point a name elsewhere between requests (what a rebinding attacker does) and count the
//! queries a name received. Messages are read and written with hickory's protocol types.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Result;
use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};

/// Names (lowercase, with the trailing dot) and their addresses, and the queries each name received.
#[derive(Default)]
struct Zone {
    names: HashMap<String, Vec<IpAddr>>,
    queries: HashMap<(String, RecordType), usize>,
}

/// A running zone. Lives as long as the test's runtime.
pub struct TestDns {
    /// Where it answers (UDP).
    pub addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
}

fn absolute(name: &str) -> String {
    format!("{}.", name.to_ascii_lowercase())
}

fn parse(addrs: &[&str]) -> Result<Vec<IpAddr>> {
    Ok(addrs.iter().map(|a| a.parse()).collect::<Result<_, _>>()?)
}

impl TestDns {
    /// Serves `zone` (names without a trailing dot) on 127.0.0.1.
    pub async fn serve(zone: &[(&str, &[&str])]) -> Result<Self> {
        let names = zone
            .iter()
            .map(|(name, addrs)| Ok((absolute(name), parse(addrs)?)))
            .collect::<Result<_>>()?;
        let zone = Arc::new(Mutex::new(Zone {
            names,
            queries: HashMap::new(),
        }));
        let socket = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await?);
        let addr = socket.local_addr()?;
        let serving = zone.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let answer = answer(&mut lock(&serving), &buf[..n]);
                if let Some(answer) = answer {
                    let _ = socket.send_to(&answer, from).await;
                }
            }
        });
        Ok(Self { addr, zone })
    }

    /// Points `name` at `addrs` from the next query on.
    pub fn set(&self, name: &str, addrs: &[&str]) -> Result<()> {
        lock(&self.zone).names.insert(absolute(name), parse(addrs)?);
        Ok(())
    }

    /// How many A and AAAA queries `name` received so far.
    pub fn queries(&self, name: &str) -> (usize, usize) {
        let zone = lock(&self.zone);
        let count = |t| zone.queries.get(&(absolute(name), t)).copied().unwrap_or(0);
        (count(RecordType::A), count(RecordType::AAAA))
    }
}

fn lock(zone: &Mutex<Zone>) -> MutexGuard<'_, Zone> {
    zone.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The answer to one query: the zone's A or AAAA records of the name, NXDOMAIN for a name it does not hold.
fn answer(zone: &mut Zone, packet: &[u8]) -> Option<Vec<u8>> {
    let query = Message::from_vec(packet).ok()?;
    let mut reply = Message::response(query.metadata.id, OpCode::Query);
    reply.metadata.authoritative = true;
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    for q in &query.queries {
        reply.add_query(q.clone());
        let name = q.name().to_ascii().to_ascii_lowercase();
        *zone
            .queries
            .entry((name.clone(), q.query_type()))
            .or_default() += 1;
        let Some(addrs) = zone.names.get(&name) else {
            reply.metadata.response_code = ResponseCode::NXDomain;
            continue;
        };
        for ip in addrs {
            let rdata = match (q.query_type(), ip) {
                (RecordType::A, IpAddr::V4(v4)) => RData::A(A(*v4)),
                (RecordType::AAAA, IpAddr::V6(v6)) => RData::AAAA(AAAA(*v6)),
                _ => continue,
            };
            reply.add_answer(Record::from_rdata(q.name().clone(), 0, rdata));
        }
    }
    reply.to_vec().ok()
}

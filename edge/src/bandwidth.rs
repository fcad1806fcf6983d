//! Bandwidth per account: every response body the edge sends is counted as it streams, against the account that
//! owns the host (the owner of the namespace its Ingress or Channel lives in), and a task reports the counts to the
//! API server every [`REPORT_EVERY`], where they add up to the account's month (`GET /me/usage`). A report that
//! fails is kept and sent with the next one. Egress is measured, never limited.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Buf;
use hyper::body::{Body, Frame, SizeHint};
use slipway_internal::InternalClient;
use slipway_internal::protocol::BandwidthReport;

/// How often the counts are reported.
pub const REPORT_EVERY: Duration = Duration::from_secs(30);

/// Bytes sent per account since the last report.
#[derive(Default)]
pub struct Bandwidth {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

impl Bandwidth {
    /// The counter of `owner` (shared by every host of theirs).
    pub fn counter(&self, owner: &str) -> Arc<AtomicU64> {
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        counters.entry(owner.to_owned()).or_default().clone()
    }

    /// The counts since the last call, reset to zero.
    pub fn take(&self) -> BTreeMap<String, u64> {
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        // Accounts whose hosts are gone and that sent nothing since are dropped.
        counters.retain(|_, c| Arc::strong_count(c) > 1 || c.load(Ordering::Relaxed) > 0);
        counters
            .iter()
            .map(|(owner, c)| (owner.clone(), c.swap(0, Ordering::Relaxed)))
            .filter(|(_, bytes)| *bytes > 0)
            .collect()
    }

    /// Adds counts back (a report that did not go through).
    pub fn give_back(&self, bytes: BTreeMap<String, u64>) {
        for (owner, n) in bytes {
            self.counter(&owner).fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Reports the counts to the API server every [`REPORT_EVERY`], forever.
pub async fn report(bandwidth: Arc<Bandwidth>, internal: InternalClient) {
    loop {
        tokio::time::sleep(REPORT_EVERY).await;
        report_once(&bandwidth, &internal).await;
    }
}

/// Reports what was counted since the last report; what cannot be reported is kept for the next one.
pub async fn report_once(bandwidth: &Bandwidth, internal: &InternalClient) {
    let bytes = bandwidth.take();
    if bytes.is_empty() {
        return;
    }
    let report = BandwidthReport { bytes };
    if let Err(e) = internal.report_bandwidth(&report).await {
        tracing::warn!(error = %e, "could not report bandwidth; it goes with the next report");
        bandwidth.give_back(report.bytes);
    }
}

/// A response body whose data bytes are added to a counter as they are sent.
pub struct Counted<B> {
    inner: B,
    counter: Option<Arc<AtomicU64>>,
}

impl<B> Counted<B> {
    /// Counts `inner` into `counter` (nothing when `None`: unknown hosts belong to no account).
    pub fn new(inner: B, counter: Option<Arc<AtomicU64>>) -> Self {
        Self { inner, counter }
    }
}

impl<B> Body for Counted<B>
where
    B: Body + Unpin,
    B::Data: Buf,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(counter)) = (&polled, &self.counter)
            && let Some(data) = frame.data_ref()
        {
            counter.fetch_add(data.remaining() as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test]
    async fn a_body_counts_what_it_sends_and_take_resets() {
        let bandwidth = Bandwidth::default();
        let counter = bandwidth.counter("alice");
        let body = Counted::new(
            Full::new(bytes::Bytes::from_static(b"hello world")),
            Some(counter.clone()),
        );
        let sent = body.collect().await.unwrap().to_bytes();
        assert_eq!(sent.len(), 11);
        assert_eq!(bandwidth.take(), BTreeMap::from([("alice".to_owned(), 11)]));
        assert!(bandwidth.take().is_empty(), "reset after a take");
        bandwidth.give_back(BTreeMap::from([("alice".to_owned(), 5)]));
        assert_eq!(bandwidth.take(), BTreeMap::from([("alice".to_owned(), 5)]));
        drop(counter);
        assert!(bandwidth.take().is_empty());
        assert!(
            bandwidth.counters.lock().unwrap().is_empty(),
            "idle accounts are dropped"
        );
    }
}
